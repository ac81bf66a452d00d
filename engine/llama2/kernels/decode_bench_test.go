//go:build unix

package kernels

import (
	"encoding/binary"
	"testing"

	"github.com/streamgate/streamgate/engine/internal/mmap"
)

// BenchmarkDecodeQ8DRAM is a one-row Q8_0 product over 1.1 GB of weights
// on huge pages, far more than any cache holds, as a decode reads them: its
// MB/s is the one-row kernel's weight stream, to set beside
// BenchmarkReadBandwidth's goroutines=1 (BenchmarkDecodeQ8's weights stay
// in cache):
//
//	go test -run '^$' -bench 'DecodeQ8DRAM|ReadBandwidth' -benchtime 8x ./engine/llama2/kernels/
func BenchmarkDecodeQ8DRAM(b *testing.B) {
	const n, d = 2048, 1 << 19
	rb := Q8_0.RowBytes(n)
	raw, free, err := mmap.Anon(rb * d)
	if err != nil {
		b.Fatal(err)
	}
	defer free()
	for i := range raw {
		raw[i] = byte(i * 7 >> 3)
	}
	for blk := 0; blk < len(raw); blk += 34 {
		binary.LittleEndian.PutUint16(raw[blk:], 0x2c00) // scale 1/16
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%13 - 6)
	}
	m := MatMul{X: x, Out: make([]float32, d), Rows: 1, N: n, D: d, Type: Q8_0, Raw: raw}
	pool := NewPool(1)
	defer pool.Close()
	c := NewCPU(pool)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		c.MatMul(m)
	}
}
