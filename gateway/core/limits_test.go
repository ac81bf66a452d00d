package core

import (
	"context"
	"testing"
)

func TestLimitKey(t *testing.T) {
	ctx := t.Context()
	kctx := WithLimitKey(ctx, "key-id")
	for _, tc := range []struct {
		ctx        context.Context
		conn, want string
	}{
		{ctx, "192.0.2.1:443", "conn:192.0.2.1:443"},
		{ctx, "", ""}, // a WebSocket request: its socket limits it
		{kctx, "192.0.2.1:443", "key:key-id"},
		{kctx, "", "key:key-id"},
	} {
		if got := limitKey(tc.ctx, tc.conn); got != tc.want {
			t.Errorf("limitKey(%q) = %q, want %q", tc.conn, got, tc.want)
		}
	}
}
