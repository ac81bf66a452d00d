//go:build amd64 && !purego

package kernels

// swigluAVX runs swiglu over whole blocks of eight of hp[:n] and gp[:n] and
// returns how many elements it did: all of n rounded down to a multiple of
// eight, or fewer where it met a block that needs expf's special cases.
//
//go:noescape
func swigluAVX(hp, gp *float32, n int) int

// swigluFast is swiglu, bit for bit, in assembly where the CPU allows.
func swigluFast(h, g []float32) {
	g = g[:len(h)]
	i := 0
	for hasAVX2FMA && len(h)-i >= 8 {
		i += swigluAVX(&h[i], &g[i], len(h)-i)
		if len(h)-i >= 8 { // a block with a special case: in Go
			swiglu(h[i:i+8], g[i:i+8])
			i += 8
		}
	}
	swiglu(h[i:], g[i:])
}
