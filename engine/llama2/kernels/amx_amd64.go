//go:build amd64 && !purego

package kernels

import "unsafe"

// amxQ8_0 is amxTileGo in AMX assembly (amx_amd64.s) for cfg's m weight
// rows and n activation rows: w is weight row 0, rb bytes apart, x holds
// nb ≥ 1 blocks, and out[r] gets weight row r's 16 results (columns past n
// and rows past m are left undefined).
//
//go:noescape
func amxQ8_0(cfg *amxConfig, w *byte, rb int, x *amxBlock, nb int, out *[16][16]float32)

// amxQ8_0x1 is amxQ8_0 for one activation row, its nb blocks as they are;
// out[r] gets weight row r's result.
//
//go:noescape
func amxQ8_0x1(cfg *amxConfig, w *byte, rb int, x *q8Block, nb int, out *[16]float32)

// hasAMX reports whether the AMX kernel can run: AVX-512 as the VNNI tiles
// need it, AMX-TILE and AMX-INT8, and the OS granting this process the
// tile state (requestAMX) and saving it (XCR0 bits 17 and 18).
var hasAMX = func() bool {
	if !hasVNNI {
		return false
	}
	_, _, _, d7 := cpuid(7, 0)
	const tile, int8 = 1 << 24, 1 << 25
	return d7&(tile|int8) == tile|int8 && requestAMX() && xgetbv0()&(3<<17) == 3<<17
}()

func init() {
	// The assembly reads x as packed 576-byte blocks: values, then scales.
	if unsafe.Sizeof(amxBlock{}) != 576 || unsafe.Offsetof(amxBlock{}.d) != 512 {
		panic("kernels: amxBlock layout changed")
	}
}

// amxTile runs the AMX kernel where the CPU has it, and its Go form where
// tests switch useAMX on without it.
func amxTile(cfg *amxConfig, w []byte, rb, m int, x []amxBlock, n, nb int, out *[16][16]float32) {
	if !hasAMX {
		amxTileGo(w, rb, m, x, n, nb, out)
		return
	}
	_ = w[(m-1)*rb+34*nb-1]
	_ = x[nb-1]
	amxQ8_0(cfg, &w[0], rb, &x[0], nb, out)
}

// amxTile1 is amxTile for one activation row.
func amxTile1(cfg *amxConfig, w []byte, rb, m int, x []q8Block, out *[16]float32) {
	if !hasAMX {
		amxTile1Go(w, rb, m, x, out)
		return
	}
	_ = w[(m-1)*rb+34*len(x)-1]
	amxQ8_0x1(cfg, &w[0], rb, &x[0], len(x), out)
}
