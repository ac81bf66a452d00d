// Package procstat reads a Linux process's CPU time, resident memory and
// run state from /proc, for the bench's server figures and the tests that
// watch a server process (CPU returns to idle after a client leaves; a
// SIGSTOP has taken hold).
package procstat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPU returns the user+system CPU seconds process pid has used, from
// /proc/<pid>/stat.
func CPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted after its last ')'.
func parseStatCPU(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(u+s) / clockTicks, nil
}

// RSS returns process pid's resident set size in bytes (VmRSS).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(b)
}

func parseVmRSS(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// Stopped reports whether every thread of process pid is stopped (state
// T in /proc/<pid>/task/*/stat): a SIGSTOP takes hold asynchronously, and
// a thread running at that moment goes on until it is descheduled.
func Stopped(pid int) (bool, error) {
	stopped, n := true, 0
	err := eachTask(pid, "stat", func(b []byte) error {
		st, err := parseState(b)
		stopped, n = stopped && st == 'T', n+1
		return err
	})
	return err == nil && stopped && n > 0, err
}

// eachTask calls fn with the file name of each thread of process pid
// (/proc/<pid>/task/*/name), skipping threads that exited meanwhile.
func eachTask(pid int, name string, fn func([]byte) error) error {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/" + name)
		if err != nil {
			continue // the thread has exited
		}
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

// parseState reads the state (field 3) of a /proc stat line.
func parseState(b []byte) (byte, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, errors.New("malformed /proc stat")
	}
	return b[i+2], nil
}

// Calls counts what a process asked of the kernel: its read and write
// system calls (syscr and syscw of /proc/<pid>/io: read, readv, pread and
// their kin, and the writes alike) and the context switches of all its
// threads (voluntary, when a thread slept, plus involuntary, when it was
// preempted; summed over /proc/<pid>/task/*/status; those of threads
// that have exited are not counted).
type Calls struct {
	Reads    int64 `json:"reads"`
	Writes   int64 `json:"writes"`
	Switches int64 `json:"context_switches"`
}

// Sub returns c less before, the counts of a window.
func (c Calls) Sub(before Calls) Calls {
	return Calls{Reads: c.Reads - before.Reads, Writes: c.Writes - before.Writes, Switches: c.Switches - before.Switches}
}

// Add returns c plus o.
func (c Calls) Add(o Calls) Calls {
	return Calls{Reads: c.Reads + o.Reads, Writes: c.Writes + o.Writes, Switches: c.Switches + o.Switches}
}

// CallCounts returns process pid's Calls so far. Reading another
// process's io needs the right to trace it (the same user, or root).
func CallCounts(pid int) (Calls, error) {
	var c Calls
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return c, err
	}
	if c.Reads, c.Writes, err = parseIO(b); err != nil {
		return c, err
	}
	err = eachTask(pid, "status", func(b []byte) error {
		n, err := parseSwitches(b)
		c.Switches += n
		return err
	})
	return c, err
}

// parseIO reads syscr and syscw from a /proc/<pid>/io file.
func parseIO(b []byte) (reads, writes int64, err error) {
	v, err := fields(b, "syscr:", "syscw:")
	return v[0], v[1], err
}

// parseSwitches reads a /proc/<pid>/status file's voluntary and
// nonvoluntary context switches, summed.
func parseSwitches(b []byte) (int64, error) {
	v, err := fields(b, "voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
	return v[0] + v[1], err
}

// fields reads the integers of the two "name: value" lines a and b.
func fields(in []byte, a, b string) ([2]int64, error) {
	var v [2]int64
	var seen [2]bool
	sc := bufio.NewScanner(bytes.NewReader(in))
	for sc.Scan() {
		line := sc.Text()
		for i, name := range [2]string{a, b} {
			if rest, ok := strings.CutPrefix(line, name); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
				if err != nil {
					return v, fmt.Errorf("%s %w", name, err)
				}
				v[i], seen[i] = n, true
			}
		}
	}
	if !seen[0] || !seen[1] {
		return v, fmt.Errorf("no %s or %s", a, b)
	}
	return v, nil
}
