//go:build unix

package kernels

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/streamgate/streamgate/engine/internal/mmap"
)

// BenchmarkReadBandwidth measures this machine's memory read bandwidth,
// STREAM-like: summing a 512 MiB buffer on huge pages (mmap.Anon, as the
// GGUF weights are) as uint64s, split across 1 and 2 goroutines. GB/s is
// wall-clock; cpu-GB/s is per second of this process's CPU time, the
// steadier number on a box busier than its cores. Decoding reads every
// weight once per token, so weight bytes per token ÷ this bandwidth is
// the least time a token can take:
//
//	go test -run '^$' -bench ReadBandwidth -benchtime 8x ./engine/llama2/kernels/
func BenchmarkReadBandwidth(b *testing.B) {
	const size = 512 << 20
	buf, free, err := mmap.Anon(size)
	if err != nil {
		b.Fatal(err)
	}
	defer free()
	for i := range buf {
		buf[i] = byte(i)
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&buf[0])), size/8)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("goroutines=%d", workers), func(b *testing.B) {
			b.SetBytes(size)
			cpu0 := cpuTime()
			var sink uint64
			for b.Loop() {
				var wg sync.WaitGroup
				sums := make([]uint64, workers)
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						sums[w] = sum64(words[w*len(words)/workers : (w+1)*len(words)/workers])
					}()
				}
				wg.Wait()
				for _, s := range sums {
					sink += s
				}
			}
			b.ReportMetric(float64(b.N)*size/(cpuTime()-cpu0).Seconds()/1e9, "cpu-GB/s")
			if sink == 1 {
				b.Log(sink)
			}
		})
	}
}

func sum64(u []uint64) uint64 {
	var s [8]uint64
	for ; len(u) >= 8; u = u[8:] {
		s[0] += u[0]
		s[1] += u[1]
		s[2] += u[2]
		s[3] += u[3]
		s[4] += u[4]
		s[5] += u[5]
		s[6] += u[6]
		s[7] += u[7]
	}
	return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7]
}

// cpuTime returns this process's CPU time, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
