//go:build !amd64 || purego

package kernels

// hasAMX is false: this build has no AMX kernel.
const hasAMX = false

// amxTile is the Go form of the AMX kernel, which tests may switch on.
func amxTile(_ *amxConfig, w []byte, rb, m int, x []amxBlock, n, nb int, out *[16][16]float32) {
	amxTileGo(w, rb, m, x, n, nb, out)
}

// amxTile1 is the Go form of the one-activation-row AMX kernel.
func amxTile1(_ *amxConfig, w []byte, rb, m int, x []q8Block, out *[16]float32) {
	amxTile1Go(w, rb, m, x, out)
}
