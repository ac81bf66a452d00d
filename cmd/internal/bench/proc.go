package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/procstat"
)

// selfCPU returns the CPU seconds (user+system) this process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// raiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit and returns
// the new soft limit.
func raiseNoFile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return 0, err
		}
	}
	return rl.Cur, nil
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// findListeners returns the local processes listening on addr's port
// (TCP, IPv4 or IPv6), found through /proc/net/tcp{,6} and the socket
// inodes in /proc/<pid>/fd. Processes of other users are not visible.
func findListeners(addr string) ([]int, error) {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, ino := range listeningInodes(b, uint16(port)) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return nil, fmt.Errorf("no local listener on port %d", port)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(d, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(d, "fd", fd.Name()))
			if err != nil {
				continue
			}
			if ino, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
				pids = append(pids, pid)
				break
			}
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("the listener on port %d belongs to no visible process", port)
	}
	return pids, nil
}

// listeningInodes parses a /proc/net/tcp table and returns the inodes of
// sockets in state LISTEN (0A) on port.
func listeningInodes(table []byte, port uint16) []string {
	want := fmt.Sprintf(":%04X", port)
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(table))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], want) {
			continue
		}
		out = append(out, f[9])
	}
	return out
}

// monitorSnapshot is what a monitor measured over a run's window.
type monitorSnapshot struct {
	clientCPU float64 // this process, seconds
	serverCPU float64 // the server processes, seconds
	serverOK  bool
	rssStart  int64 // server RSS before the load, bytes
	rssMax    int64 // highest RSS seen in the window
	activeMax int64 // most requests in flight at a sample
	rssAtFull int64 // the highest RSS seen with activeMax in flight
	rssOK     bool
	gc        *GCStats // this process's GC in the window (embedded)
	// The gateway process alone (split servers): RSS before the load and
	// at rssAtFull's sample.
	gwStart, gwAtFull int64
	gwOK              bool
	gwCPU             float64 // the gateway process's CPU in the window
	gwCPUOK           bool
	// System calls and context switches in the window: the server
	// processes' together, and the gateway's alone.
	serverCalls, gwCalls     procstat.Calls
	serverCallsOK, gwCallsOK bool
}

// monitor samples CPU at the start and end of the window and server RSS
// every 200ms within it.
type monitor struct {
	pids   []int
	gwPid  int
	active *atomic.Int64
	self   bool // also read this process's GC (embedded)
	done   chan struct{}
	wg     sync.WaitGroup
	gc0    *gcMetrics

	mu               sync.Mutex
	snap             monitorSnapshot
	started          bool
	client0, server0 float64
	gw0              float64
	calls0, gwCalls0 procstat.Calls
}

func (m *monitor) serverCPU() (float64, bool) {
	if len(m.pids) == 0 {
		return 0, false
	}
	var sum float64
	for _, pid := range m.pids {
		c, err := procstat.CPU(pid)
		if err != nil {
			return 0, false
		}
		sum += c
	}
	return sum, true
}

// serverCalls is the server processes' system calls and switches so far.
func (m *monitor) serverCalls() (procstat.Calls, bool) {
	var sum procstat.Calls
	for _, pid := range m.pids {
		c, err := procstat.CallCounts(pid)
		if err != nil {
			return sum, false
		}
		sum = sum.Add(c)
	}
	return sum, len(m.pids) > 0
}

func (m *monitor) rss() (int64, bool) {
	if len(m.pids) == 0 {
		return 0, false
	}
	var sum int64
	for _, pid := range m.pids {
		r, err := procstat.RSS(pid)
		if err != nil {
			return 0, false
		}
		sum += r
	}
	return sum, true
}

// startMonitor starts sampling.
func startMonitor(pids []int, gwPid int, win window, active *atomic.Int64, self bool) *monitor {
	m := &monitor{pids: pids, gwPid: gwPid, active: active, self: self, done: make(chan struct{})}
	m.snap.rssStart, m.snap.rssOK = m.rss()
	if gwPid > 0 {
		r, err := procstat.RSS(gwPid)
		m.snap.gwStart, m.snap.gwOK = r, err == nil
	}
	// A window that opens now (no warmup) opens before the first request
	// starts, not whenever a goroutine gets to run: on a busy machine that
	// could be after the last request ended, and the window's counts 0.
	now := time.Until(win.from) <= 0
	if now {
		m.begin()
	}
	m.wg.Go(func() {
		if !now {
			select {
			case <-time.After(time.Until(win.from)):
				m.begin()
			case <-m.done:
				return
			}
		}
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for time.Now().Before(win.to) {
			m.sampleRSS()
			select {
			case <-t.C:
			case <-m.done:
				return
			}
		}
	})
	return m
}

func (m *monitor) begin() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.started = true
	if m.self {
		m.gc0 = readGCMetrics()
	}
	m.client0 = selfCPU()
	m.server0, m.snap.serverOK = m.serverCPU()
	m.calls0, m.snap.serverCallsOK = m.serverCalls()
	if m.gwPid > 0 {
		var err error
		m.gw0, err = procstat.CPU(m.gwPid)
		m.snap.gwCPUOK = err == nil
		m.gwCalls0, err = procstat.CallCounts(m.gwPid)
		m.snap.gwCallsOK = err == nil
	}
}

func (m *monitor) sampleRSS() {
	r, ok := m.rss()
	if !ok {
		return
	}
	var gw int64
	if m.gwPid > 0 {
		gw, _ = procstat.RSS(m.gwPid)
	}
	a := m.active.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snap.rssMax = max(m.snap.rssMax, r)
	switch {
	case a > m.snap.activeMax:
		m.snap.activeMax, m.snap.rssAtFull, m.snap.gwAtFull = a, r, gw
	case a == m.snap.activeMax:
		m.snap.rssAtFull = max(m.snap.rssAtFull, r)
		m.snap.gwAtFull = max(m.snap.gwAtFull, gw)
	}
}

// stop ends sampling and returns the figures of the window.
func (m *monitor) stop() monitorSnapshot {
	close(m.done)
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.started {
		return monitorSnapshot{rssStart: m.snap.rssStart, rssOK: m.snap.rssOK}
	}
	s := m.snap
	s.clientCPU = selfCPU() - m.client0
	if m.gc0 != nil {
		s.gc = readGCMetrics().since(m.gc0)
	}
	if s.serverOK {
		end, ok := m.serverCPU()
		s.serverOK = ok
		s.serverCPU = end - m.server0
	}
	if s.gwCPUOK {
		end, err := procstat.CPU(m.gwPid)
		s.gwCPUOK = err == nil
		s.gwCPU = end - m.gw0
	}
	if s.serverCallsOK {
		end, ok := m.serverCalls()
		s.serverCallsOK = ok
		s.serverCalls = end.Sub(m.calls0)
	}
	if s.gwCallsOK {
		end, err := procstat.CallCounts(m.gwPid)
		s.gwCallsOK = err == nil
		s.gwCalls = end.Sub(m.gwCalls0)
	}
	return s
}
