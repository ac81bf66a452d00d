package main

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// On a terminal the log is text a person reads, with no flag: serve's
// stderr is a pseudo-terminal here.
func TestLogOnTerminal(t *testing.T) {
	bin := buildBinary(t)
	ptm, pts := openPTY(t)
	cmd := exec.Command(bin, "serve", "--http", freeAddr(t), "--grpc", freeAddr(t))
	cmd.Dir = t.TempDir()
	cmd.Env = append(testEnv(), "XDG_CACHE_HOME="+t.TempDir(), "STREAMGATE_MODEL_DIR="+t.TempDir())
	cmd.Stderr = pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close() // the child has its own
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		ptm.Close()
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(ptm)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	timeout := time.After(20 * time.Second)
	var seen []string
	for serving := false; !serving; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("serve ended before it served:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, line)
			if strings.HasPrefix(line, "{") {
				t.Errorf("a JSON line on a terminal: %s", line)
			}
			serving = strings.Contains(line, "msg=\"gateway serving\"")
		case <-timeout:
			t.Fatalf("no text line saying the gateway serves:\n%s", strings.Join(seen, "\n"))
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for line := range lines { // until the terminal closes with serve's exit
		if strings.Contains(line, "msg=\"shutting down\"") && !strings.Contains(line, "grace=10s") {
			t.Errorf("grace is not Go's duration text: %s", line)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// openPTY opens a pseudo-terminal: its controlling side and the terminal.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ptm, pts
}
