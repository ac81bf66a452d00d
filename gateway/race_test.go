//go:build race

package gateway

// raceEnabled: the race detector makes sync.Pool drop items at random
// and instruments allocations, so allocation counts are not checked.
const raceEnabled = true
