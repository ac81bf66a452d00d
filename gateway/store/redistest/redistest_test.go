package redistest

import (
	"slices"
	"testing"
)

// A server whose port another server holds does not start: the server
// answering there is not its own (another test's, which took the port
// between freeAddr and the start), so it must not be taken for it.
func TestStartRefusesAnotherServersPort(t *testing.T) {
	a := Start(t)
	b := &Server{t: t, dir: t.TempDir(), Addr: a.Addr}
	if err := b.start(); err == nil {
		b.Stop()
		t.Fatalf("a second redis-server started on %s, where the first listens", a.Addr)
	}
}

// A cluster of three masters with a replica each: the replica of one
// takes its place on Failover.
func TestClusterFailover(t *testing.T) {
	c := StartClusterReplicas(t, 3, 1)
	if got := len(c.Masters()); got != 3 {
		t.Fatalf("%d masters, want 3", got)
	}
	old := c.Masters()[0]
	next := c.Failover(t, old)
	masters := c.Masters()
	if len(masters) != 3 || next == old || !slices.Contains(masters, next) || slices.Contains(masters, old) {
		t.Errorf("after the failover of %s to %s the masters are %v", old.Addr, next.Addr, masters)
	}
}
