package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// spawned is a `streamgate serve` the bench started for one run (--spawn),
// so that every transport is measured on a fresh server: its RSS starts
// from nothing, and its garbage collector reports each cycle (GODEBUG
// gctrace=1, read from its stderr) for the run's GC figures.
type spawned struct {
	cmd        *exec.Cmd
	http, grpc string
	gc         *gcTrace
	lines      sync.WaitGroup // the stderr reader
	tail       *tailBuffer    // its last log lines, for errors
}

var (
	engineAddrRE  = regexp.MustCompile(`msg="engine serving" grpc=(\S+)`)
	gatewayAddrRE = regexp.MustCompile(`msg="gateway serving" http=(\S+)`)
)

// spawnServer starts exe (default: this binary) as `streamgate serve` on
// free loopback ports with args added, and waits until both its listeners
// serve.
func spawnServer(ctx context.Context, exe string, args []string) (*spawned, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	argv := append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, args...)
	cmd := exec.Command(exe, argv...)
	cmd.Env = append(os.Environ(), "GODEBUG="+withGCTrace(os.Getenv("GODEBUG")))
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &spawned{cmd: cmd, gc: &gcTrace{}, tail: &tailBuffer{}}
	ready := make(chan struct{})
	s.lines.Go(func() { s.read(stderr, ready) })
	tm := time.NewTimer(30 * time.Second)
	defer tm.Stop()
	select {
	case <-ready:
		return s, nil
	case <-tm.C:
		err = errors.New("no 'serving' log lines within 30s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.stop()
	return nil, fmt.Errorf("spawned server: %w; its log:\n%s", err, s.tail.String())
}

// read follows the server's stderr: addresses, then GC cycles.
func (s *spawned) read(r io.Reader, ready chan struct{}) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if s.gc.add(line, time.Now()) {
			continue
		}
		s.tail.add(line)
		if ready == nil {
			continue
		}
		if m := engineAddrRE.FindStringSubmatch(line); m != nil {
			s.grpc = m[1]
		}
		if m := gatewayAddrRE.FindStringSubmatch(line); m != nil {
			s.http = m[1]
		}
		if s.http != "" && s.grpc != "" {
			close(ready)
			ready = nil
		}
	}
}

func (s *spawned) pid() int { return s.cmd.Process.Pid }

// stop ends the server (SIGTERM, then SIGKILL after 5s) and waits for it.
func (s *spawned) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		s.lines.Wait()
		_ = s.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// withGCTrace adds gctrace=1 to a GODEBUG value.
func withGCTrace(v string) string {
	if v == "" {
		return "gctrace=1"
	}
	return v + ",gctrace=1"
}

// tailBuffer keeps the last lines of a log.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuffer) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, l)
	if len(t.lines) > 20 {
		t.lines = t.lines[1:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// gcCycle is one garbage collection as gctrace reports it.
type gcCycle struct {
	at     time.Time // when the bench read the line
	pauses [2]float64
	cpu    float64 // seconds of CPU, idle marking excluded
}

// gcTrace collects the cycles of a GODEBUG=gctrace=1 log.
type gcTrace struct {
	mu     sync.Mutex
	cycles []gcCycle
}

// gctrace line: gc 12 @3.456s 1%: 0.025+1.2+0.011 ms clock, 0.050+0.30/1.1/2.2+0.022 ms cpu, ...
var gcLineRE = regexp.MustCompile(`^gc \d+ @[\d.]+s \d+%: ([\d.]+)\+[\d.]+\+([\d.]+) ms clock, ([\d.]+)\+([\d.]+)/([\d.]+)/[\d.]+\+([\d.]+) ms cpu`)

// add records line if it is a gctrace line.
func (g *gcTrace) add(line string, at time.Time) bool {
	m := gcLineRE.FindStringSubmatch(line)
	if m == nil {
		return false
	}
	f := make([]float64, len(m))
	for i := 1; i < len(m); i++ {
		f[i], _ = strconv.ParseFloat(m[i], 64)
	}
	c := gcCycle{at: at, pauses: [2]float64{f[1] / 1e3, f[2] / 1e3}, cpu: (f[3] + f[4] + f[5] + f[6]) / 1e3}
	g.mu.Lock()
	g.cycles = append(g.cycles, c)
	g.mu.Unlock()
	return true
}

// window returns the GC figures of the cycles in w.
func (g *gcTrace) window(w window) *GCStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := &GCStats{Source: "gctrace"}
	var pauses []int64
	for _, c := range g.cycles {
		if !w.in(c.at) {
			continue
		}
		st.Cycles++
		st.CPUSeconds += c.cpu
		for _, p := range c.pauses {
			pauses = append(pauses, int64(p*1e9))
		}
	}
	st.setPauses(summarize(pauses))
	return st
}
