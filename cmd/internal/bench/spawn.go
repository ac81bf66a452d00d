package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// spawned is a server the bench started for one run (--spawn), so that
// every transport is measured on a fresh server: its RSS starts from
// nothing, and its garbage collector reports each cycle (GODEBUG
// gctrace=1, read from its stderr) for the run's GC figures. It is one
// `streamgate serve`, or with split a `streamgate engine` and a
// `streamgate gateway` in front of it, whose memory is then reported
// alone.
type spawned struct {
	procs      []*serverProc // serve; or engine, gateway
	http, grpc string
}

// serverProc is one spawned process.
type serverProc struct {
	cmd   *exec.Cmd
	gc    *gcTrace
	lines sync.WaitGroup   // the stderr reader
	tail  *tailBuffer      // its last log lines, for errors
	addr  chan indexedAddr // each address it serves, once
}

// A servingLine is the log line of a spawned server that says where it
// serves: its message and the attributes that may hold the address
// (host:port, or a URL whose host:port is taken), the first one found.
type servingLine struct {
	msg  string
	keys []string
}

var (
	engineServing = servingLine{"engine serving", []string{"grpc"}}
	// The gateway logs its url; builds before TLS logged http.
	gatewayServing = servingLine{"gateway serving", []string{"url", "http"}}
)

// find returns the address in line when it is l, in either log format
// (JSON, the default, or text, as --log-format text and older builds
// write it).
func (l servingLine) find(line string) (string, bool) {
	attrs := map[string]string{}
	if strings.HasPrefix(line, "{") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != l.msg {
			return "", false
		}
		for k, v := range rec {
			if s, ok := v.(string); ok {
				attrs[k] = s
			}
		}
	} else {
		_, rest, ok := strings.Cut(line, ` msg="`+l.msg+`" `)
		if !ok {
			return "", false
		}
		for _, kv := range strings.Fields(rest) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				attrs[k] = v
			}
		}
	}
	for _, k := range l.keys {
		if v, ok := attrs[k]; ok {
			if _, hostPort, isURL := strings.Cut(v, "://"); isURL {
				v = hostPort
			}
			return v, true
		}
	}
	return "", false
}

// spawnServer starts exe (default: this binary) as `streamgate serve` on
// free loopback ports with engineArgs and args added, or with split as
// `streamgate engine` (engineArgs) and `streamgate gateway` (args), and
// waits until they serve.
func spawnServer(ctx context.Context, exe string, split bool, engineArgs, args []string) (*spawned, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	s := &spawned{}
	fail := func(err error) (*spawned, error) {
		s.stop()
		return nil, err
	}
	if !split {
		argv := append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, engineArgs...)
		p, err := startProc(exe, append(argv, args...), gatewayServing, engineServing)
		if err != nil {
			return nil, err
		}
		s.procs = []*serverProc{p}
		addrs, err := p.await(ctx, 2)
		if err != nil {
			return fail(err)
		}
		s.http, s.grpc = addrs[0], addrs[1]
		return s, nil
	}
	eng, err := startProc(exe, append([]string{"engine", "--grpc", "127.0.0.1:0"}, engineArgs...), engineServing)
	if err != nil {
		return nil, err
	}
	s.procs = []*serverProc{eng}
	addrs, err := eng.await(ctx, 1)
	if err != nil {
		return fail(err)
	}
	s.grpc = addrs[0]
	gw, err := startProc(exe, append([]string{"gateway", "--http", "127.0.0.1:0", "--upstream", s.grpc}, args...), gatewayServing)
	if err != nil {
		return fail(err)
	}
	s.procs = append(s.procs, gw)
	if addrs, err = gw.await(ctx, 1); err != nil {
		return fail(err)
	}
	s.http = addrs[0]
	return s, nil
}

// startProc starts exe with argv, reading its stderr for the addresses
// of the lines (in that order) and for GC cycles.
func startProc(exe string, argv []string, lines ...servingLine) (*serverProc, error) {
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
	p := &serverProc{cmd: cmd, gc: &gcTrace{}, tail: &tailBuffer{}, addr: make(chan indexedAddr, len(lines))}
	p.lines.Go(func() { p.read(stderr, lines) })
	return p, nil
}

// read follows the process's stderr: addresses, then GC cycles.
func (p *serverProc) read(r io.Reader, lines []servingLine) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := make([]bool, len(lines))
	for sc.Scan() {
		trace, line := splitRecord(sc.Text())
		if trace != "" {
			p.gc.add(trace, time.Now())
		}
		if line == "" {
			continue
		}
		p.tail.add(line)
		for i, l := range lines {
			if addr, ok := l.find(line); ok && !found[i] {
				found[i] = true
				p.addr <- indexedAddr{i, addr}
			}
		}
	}
}

// splitRecord splits a line of a spawned server's stderr into the GC
// trace's part and the log record's. The runtime writes a gctrace line
// in pieces (GODEBUG=gctrace=1), on the stderr a log record is written to
// in one piece, so a record may land inside a trace line: "gc 3 @0.02s
// 1%: ... ms cpu, " then the record, and the trace line's rest ("4->4->2
// MB, ..., 2 P") on a line of its own. A line that is all trace has no
// record; one that is all record has no trace.
func splitRecord(line string) (trace, record string) {
	i := strings.Index(line, `{"time":`)
	if i < 0 {
		i = strings.Index(line, "time=")
	}
	switch {
	case i == 0:
		return "", line
	case i > 0:
		return line[:i], line[i:]
	case gcLineRE.MatchString(line):
		return line, ""
	}
	return "", line
}

type indexedAddr struct {
	i    int
	addr string
}

// await returns the n addresses the process serves, in the order its
// lines were given, once its log has shown them all.
func (p *serverProc) await(ctx context.Context, n int) ([]string, error) {
	tm := time.NewTimer(30 * time.Second)
	defer tm.Stop()
	addrs := make([]string, n)
	for got := 0; got < n; got++ {
		select {
		case a := <-p.addr:
			addrs[a.i] = a.addr
		case <-tm.C:
			return nil, fmt.Errorf("spawned %s: no 'serving' log line within 30s; its log:\n%s", p.cmd.Args[1], p.tail.String())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return addrs, nil
}

func (s *spawned) pids() []int {
	var pids []int
	for _, p := range s.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

// gateway is the process serving HTTP.
func (s *spawned) gateway() *serverProc { return s.procs[len(s.procs)-1] }

// gcWindow sums the GC figures of the processes over w.
func (s *spawned) gcWindow(w window) *GCStats {
	var st *GCStats
	for _, p := range s.procs {
		g := p.gc.window(w)
		if st == nil {
			st = g
			continue
		}
		st.merge(g)
	}
	return st
}

// stop ends the servers, the gateway first (SIGTERM, then SIGKILL after
// 5s), and waits for them.
func (s *spawned) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].stop()
	}
}

func (p *serverProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		p.lines.Wait()
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
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
	at     time.Time     // when the bench read the line: the cycle's end
	wall   time.Duration // the cycle's length
	pauses [2]float64
	// cpu is the seconds of CPU of assists and background marking.
	// gctrace's CPU for the two stop-the-world phases is their wall time
	// times GOMAXPROCS, whether or not the threads ran (on a busy machine
	// a pause waits long for descheduled threads): it is left out, and
	// the pauses are reported apart.
	cpu float64
	// live is the heap the cycle marked live and stacks the goroutine
	// stacks it scanned, in bytes (gctrace's whole MB); mem is false
	// when the line lost them (a log record split it).
	live, stacks int64
	mem          bool
}

// gcTrace collects the cycles of a GODEBUG=gctrace=1 log.
type gcTrace struct {
	mu     sync.Mutex
	cycles []gcCycle
}

// gctrace line: gc 12 @3.456s 1%: 0.025+1.2+0.011 ms clock, 0.050+0.30/1.1/2.2+0.022 ms cpu, ...
var gcLineRE = regexp.MustCompile(`^gc \d+ @[\d.]+s \d+%: ([\d.]+)\+([\d.]+)\+([\d.]+) ms clock, ([\d.]+)\+([\d.]+)/([\d.]+)/[\d.]+\+([\d.]+) ms cpu`)

// gctrace's memory figures: heap at the start -> at the end -> marked
// live, the goal, then the stacks scanned.
var gcMemRE = regexp.MustCompile(`, \d+->\d+->(\d+) MB, \d+ MB goal, (\d+) MB stacks`)

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
	c := gcCycle{at: at, wall: time.Duration((f[1] + f[2] + f[3]) * 1e6),
		pauses: [2]float64{f[1] / 1e3, f[3] / 1e3}, cpu: (f[5] + f[6]) / 1e3}
	if mm := gcMemRE.FindStringSubmatch(line); mm != nil {
		live, _ := strconv.ParseInt(mm[1], 10, 64)
		stacks, _ := strconv.ParseInt(mm[2], 10, 64)
		c.live, c.stacks, c.mem = live<<20, stacks<<20, true
	}
	g.mu.Lock()
	g.cycles = append(g.cycles, c)
	g.mu.Unlock()
	return true
}

// window returns the GC figures of the cycles that ended in w; a cycle
// that began before w counts its CPU in proportion to its time in w.
func (g *gcTrace) window(w window) *GCStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := &GCStats{Source: "gctrace"}
	for _, c := range g.cycles {
		if !w.in(c.at) {
			continue
		}
		st.Cycles++
		share := 1.0
		if start := c.at.Add(-c.wall); start.Before(w.from) && c.wall > 0 {
			share = float64(c.at.Sub(w.from)) / float64(c.wall)
		}
		st.CPUSeconds += c.cpu * share
		for _, p := range c.pauses {
			st.pauses = append(st.pauses, int64(p*1e9))
		}
		if c.mem {
			st.LiveMB, st.StacksMB = float64(c.live)/(1<<20), float64(c.stacks)/(1<<20)
		}
	}
	st.setPauses(summarize(slices.Clone(st.pauses)))
	return st
}
