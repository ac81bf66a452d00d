package gateway

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/streamgate/streamgate/upstream"
)

// The tests here drive the gateway without a network (canned calls,
// synctest, recorders). The black-box tests against a whole stack (engine,
// upstream, gateway over loopback) are in cmd/internal/e2e, where the
// stack is wired.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testServer is newServer for requests made by httptest.NewRequest, whose
// Host is example.com: a name the open gateway's guard refuses unless
// allowed.
func testServer(up *upstream.Client, inspect Inspector, opts *Options) *Server {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.AllowedHosts == nil {
		o.AllowedHosts = []string{"example.com"}
	}
	return newServer(up, inspect, &o)
}
