package redistest

import "testing"

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
