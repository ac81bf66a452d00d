package bench

import (
	"net"
	"os"
	"slices"
	"testing"
)

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
	if c, err := procCPU(os.Getpid()); err != nil || c < 0 {
		t.Errorf("procCPU(self) = %v, %v", c, err)
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
	if r, err := procRSS(os.Getpid()); err != nil || r <= 0 {
		t.Errorf("procRSS(self) = %v, %v", r, err)
	}
}

func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
`
	if got := listeningInodes([]byte(table), 8080); !slices.Equal(got, []string{"111"}) {
		t.Errorf("port 8080: %v", got)
	}
	if got := listeningInodes([]byte(table), 8001); !slices.Equal(got, []string{"222"}) {
		t.Errorf("port 8001: %v", got)
	}
}

func TestFindListeners(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	pids, err := findListeners(lis.Addr().String())
	if err != nil || !slices.Contains(pids, os.Getpid()) {
		t.Errorf("findListeners = %v, %v; want this process", pids, err)
	}
}
