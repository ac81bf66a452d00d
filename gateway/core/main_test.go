package core

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/streamgate/streamgate/upstream"
)

// The tests here drive the core without a network (canned calls,
// synctest, recorders); the surfaces' handlers are tested in their own
// packages and in cmd/internal/e2e.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testServer is New for requests made by httptest.NewRequest, whose Host
// is example.com: a name the open gateway's guard refuses unless allowed.
func testServer(up *upstream.Client, inspect Inspector, opts *Options) *Server {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.AllowedHosts == nil {
		o.AllowedHosts = []string{"example.com"}
	}
	return New(up, inspect, &o)
}
