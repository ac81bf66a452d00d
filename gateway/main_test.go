package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests here drive the gateway without a network (canned calls,
// synctest, recorders). The black-box tests against a whole stack (engine,
// upstream, gateway over loopback) are in cmd/internal/e2e, where the
// stack is wired.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
