package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name               string
		live, roots, floor uint64
		base, want         int
	}{
		{"small heap grows to the floor", 8 * mb, 0, 64 * mb, 100, 700},
		{"roots count as the runtime counts them", 8 * mb, 8 * mb, 64 * mb, 100, 350},
		{"never below GOGC", 40 * mb, 0, 64 * mb, 100, 100},
		{"live past the floor", 100 * mb, 0, 64 * mb, 100, 100},
		{"a higher GOGC is kept", 8 * mb, 0, 64 * mb, 1000, 1000},
		{"GOGC=off is left alone", 8 * mb, 0, 64 * mb, -1, -1},
		{"nothing live yet: the runtime's floor is the limit", 0, 0, 64 * mb, 100, 1600},
		{"roots alone: the runtime's floor is the limit", 0, mb / 2, 64 * mb, 100, 1600},
		{"a tiny heap: the runtime's floor is the limit", mb, mb, 64 * mb, 100, 1600},
		{"a floor under the runtime's", mb, 0, 2 * mb, 100, 100},
	} {
		if got := Percent(c.live, c.roots, c.floor, c.base); got != c.want {
			t.Errorf("%s: Percent(%d, %d, %d, %d) = %d, want %d", c.name, c.live, c.roots, c.floor, c.base, got, c.want)
		}
	}
}

func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestTunerFollowsCollections: with a floor far above the test's heap,
// GOGC rises after a collection; Stop puts the process's own back.
func TestTunerFollowsCollections(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	tu := Start(1 << 30)
	runtime.GC()
	runtime.GC() // the first cycle's cleanup has run by the end of the second's sweep
	for i := 0; i < 100 && gogc() == 100; i++ {
		runtime.GC()
	}
	if got := gogc(); got <= 100 {
		t.Fatalf("GOGC = %d after collections with a 1 GiB floor, want more than 100", got)
	}
	tu.Stop()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC = %d after Stop, want 100", got)
	}
	runtime.GC()
	runtime.GC()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC = %d after Stop and collections, want 100 (the tuner still ran)", got)
	}
}

func TestZeroFloorLeavesGOGC(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	tu := Start(0)
	runtime.GC()
	runtime.GC()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC = %d with no floor, want 100", got)
	}
	tu.Stop()
}
