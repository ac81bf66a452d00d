// Package redistest starts a real redis-server for tests, on a free
// loopback port, with persistence off.
//
// A test that needs Redis calls Start. Without redis-server on PATH the
// test is skipped, or fails when STREAMGATE_REQUIRE is set (as CI
// sets it).
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is a running redis-server owned by one test.
type Server struct {
	t    testing.TB
	Addr string // host:port
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start starts a redis-server on a free port; it is stopped when the test
// ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("STREAMGATE_REQUIRE") != "" {
			t.Fatalf("redis-server not found and STREAMGATE_REQUIRE is set: %v", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
	s := &Server{t: t, dir: t.TempDir()}
	var err error
	for range 5 { // a free port can be taken between finding and binding it
		s.Addr = freeAddr(t)
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Stop stops the server (SIGKILL: nothing is saved). Restart starts it
// again on the same port, empty.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts a stopped server again on the same address.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for range 50 { // the port may linger briefly
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redis-server restart: %v", err)
}

func (s *Server) start() error {
	host, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", host, "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--protected-mode", "no", "--loglevel", "warning")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	var log strings.Builder
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if log.Len() < 4096 {
				log.WriteString(sc.Text() + "\n")
			}
		}
		cmd.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if c, err := net.Dial("tcp", s.Addr); err == nil {
			ok := ping(c)
			c.Close()
			if ok {
				s.cmd, s.done = cmd, done
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("exited: %s", log.String())
		case <-ctx.Done():
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("not answering on %s", s.Addr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func ping(c net.Conn) bool {
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
