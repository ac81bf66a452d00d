package procstat

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseStatCPU(t *testing.T) {
	// comm with spaces and a ')'; utime 250, stime 150 ticks.
	line := "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 8 0 100 1000000 200 18446744073709551615"
	got, err := parseStatCPU([]byte(line))
	if err != nil || got != 4 {
		t.Errorf("parseStatCPU = %v, %v; want 4", got, err)
	}
	if _, err := parseStatCPU([]byte("garbage")); err == nil {
		t.Error("no error for garbage")
	}
	if c, err := CPU(os.Getpid()); err != nil || c < 0 {
		t.Errorf("CPU(self) = %v, %v", c, err)
	}
}

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS([]byte("Name:\tx\nVmPeak:\t  2000 kB\nVmRSS:\t  1500 kB\n"))
	if err != nil || got != 1500*1024 {
		t.Errorf("parseVmRSS = %v, %v", got, err)
	}
	if _, err := parseVmRSS([]byte("Name:\tx\n")); err == nil {
		t.Error("no error without VmRSS")
	}
	if r, err := RSS(os.Getpid()); err != nil || r <= 0 {
		t.Errorf("RSS(self) = %v, %v", r, err)
	}
}

func TestState(t *testing.T) {
	st, err := parseState([]byte("1234 (my (odd) proc) T 1 1234"))
	if err != nil || st != 'T' {
		t.Errorf("parseState = %c, %v", st, err)
	}
	if _, err := parseState([]byte("garbage")); err == nil {
		t.Error("no error for garbage")
	}
	if stopped, err := Stopped(os.Getpid()); err != nil || stopped {
		t.Errorf("Stopped(self) = %v, %v", stopped, err)
	}
}

func TestCallCounts(t *testing.T) {
	r, w, err := parseIO([]byte("rchar: 10\nwchar: 20\nsyscr: 3\nsyscw: 4\nread_bytes: 0\n"))
	if err != nil || r != 3 || w != 4 {
		t.Errorf("parseIO = %d, %d, %v", r, w, err)
	}
	if _, _, err := parseIO([]byte("rchar: 10\nsyscr: 3\n")); err == nil {
		t.Error("no error without syscw")
	}
	// "voluntary_ctxt_switches:" must not match the nonvoluntary line.
	n, err := parseSwitches([]byte("Name:\tx\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t5\n"))
	if err != nil || n != 12 {
		t.Errorf("parseSwitches = %d, %v", n, err)
	}
	// This process's own counts grow with what it does.
	before, err := CallCounts(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "calls")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 10 {
		f.Write([]byte("x"))
	}
	after, err := CallCounts(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d.Writes < 10 || d.Reads < 1 || d.Switches < 0 {
		t.Errorf("after 10 writes: %+v", d)
	}
}
