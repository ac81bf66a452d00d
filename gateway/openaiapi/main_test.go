package openaiapi

import (
	"testing"

	"go.uber.org/goleak"
)

// The OpenAI surface's handlers are tested through the gateway's router
// (package gateway) and end to end (cmd/internal/e2e); the tests here
// reach its internals.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
