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
	"syscall"
	"testing"
	"time"
)

// Server is a running redis-server owned by one test.
type Server struct {
	t    testing.TB
	Addr string // host:port
	dir  string
	args []string // more redis-server arguments
	cmd  *exec.Cmd
	done chan struct{}
}

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start starts a redis-server on a free port; it is stopped when the test
// ends.
func Start(t testing.TB) *Server {
	t.Helper()
	need(t, "redis-server")
	return start(t)
}

// need skips t (fails it under STREAMGATE_REQUIRE) without tool.
func need(t testing.TB, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("STREAMGATE_REQUIRE") != "" {
			t.Fatalf("%s not found and STREAMGATE_REQUIRE is set: %v", tool, err)
		}
		t.Skipf("%s not found: %v", tool, err)
	}
}

// start starts a redis-server with args on a free port.
func start(t testing.TB, args ...string) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), args: args}
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
	cmd.Args = append(cmd.Args, s.args...)
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
			// Another test's server may hold the port (it took the
			// port back between freeAddr and this start): the one
			// answering must be ours.
			ok := ping(c) && serverPID(c) == cmd.Process.Pid
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

// serverPID is the process_id the server on c reports (INFO server), 0
// when it reports none.
func serverPID(c net.Conn) int {
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// Pause stops the server with SIGSTOP: it holds its connections and
// answers nothing, as a hung Redis does, until Continue.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("redis-server SIGSTOP: %v", err)
	}
}

// Continue resumes a paused server with SIGCONT.
func (s *Server) Continue() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("redis-server SIGCONT: %v", err)
	}
}

// CommandsProcessed is the server's total_commands_processed (INFO
// stats): every command it ran since it started.
func (s *Server) CommandsProcessed(t testing.TB) int64 {
	t.Helper()
	return s.info(t, "stats", "total_commands_processed")
}

// BlockedClients is the server's blocked_clients (INFO clients): the
// connections waiting in a blocking command such as XREAD BLOCK.
func (s *Server) BlockedClients(t testing.TB) int64 {
	t.Helper()
	return s.info(t, "clients", "blocked_clients")
}

// info is the integer field of INFO section.
func (s *Server) info(t testing.TB, section, field string) int64 {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("INFO " + section + "\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("INFO %s: %v", section, err)
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
}
