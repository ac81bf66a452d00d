package store_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// openReplica opens one replica's client of srv and watches its key
// listener.
func openReplica(t *testing.T, srv *redistest.Server) (*store.Redis, <-chan string) {
	t.Helper()
	s, err := store.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := s.(*store.Redis)
	return r, store.WatchKeys(r)
}

// await waits for the listener's event want (a failure guard, not a
// measure: the event is what the test waits for).
func await(t *testing.T, events <-chan string, want string) {
	t.Helper()
	guard := time.NewTimer(time.Minute)
	defer guard.Stop()
	for {
		select {
		case e := <-events:
			if e == want {
				return
			}
		case <-guard.C:
			t.Fatalf("the key listener never said %q", want)
		}
	}
}

// newKey creates a key through s and returns its hash.
func newKey(t *testing.T, s store.Store, name string) string {
	t.Helper()
	k, _, err := store.NewKey(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	return k.Hash
}

// A key revoked through one replica stops working on another that had
// it cached: the revocation reaches it by pub/sub.
func TestKeyRevocationReachesEveryReplica(t *testing.T) {
	srv := redistest.Start(t)
	a, _ := openReplica(t, srv)
	b, events := openReplica(t, srv)
	ctx := t.Context()
	hash := newKey(t, a, "alice")
	if _, err := b.LookupKey(ctx, hash); err != nil { // starts b's listener
		t.Fatal(err)
	}
	await(t, events, "subscribed")
	if _, err := b.LookupKey(ctx, hash); err != nil || !store.KeyCached(b, hash) {
		t.Fatalf("b did not cache the key: %v", err)
	}
	if err := a.RevokeKey(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	await(t, events, "changed")
	if store.KeyCached(b, hash) {
		t.Fatal("b still caches the revoked key")
	}
	if _, err := b.LookupKey(ctx, hash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b after the revocation: %v, want ErrNotFound", err)
	}
}

// While Redis is down a cached key still works, an unknown one gets
// ErrUnavailable, and limits follow the replica's policy: open admits by
// its share of the limit, closed fails. When Redis is back the replica
// resubscribes and reads Redis again by itself.
func TestStoreOutage(t *testing.T) {
	srv := redistest.Start(t)
	open, openEvents := openReplica(t, srv)
	closed, closedEvents := openReplica(t, srv)
	closed.SetLimitsOnFailure(false)
	var logs bytes.Buffer // written by Admit, on this goroutine
	open.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Unix(1e9, 0)
	store.DriveLocalLog(open, func() time.Time { return now })
	ctx := t.Context()
	hash := newKey(t, open, "bob")
	closed.LookupKey(ctx, hash)
	await(t, closedEvents, "subscribed")
	open.LookupKey(ctx, hash)
	await(t, openEvents, "subscribed") // it counts two replicas
	for _, r := range []*store.Redis{open, closed} {
		if _, err := r.LookupKey(ctx, hash); err != nil || !store.KeyCached(r, hash) {
			t.Fatalf("not cached: %v", err)
		}
	}

	srv.Stop()
	l := store.Limit{RPM: 4, Concurrency: 4}
	for _, r := range []*store.Redis{open, closed} {
		if _, err := r.LookupKey(ctx, hash); err != nil {
			t.Fatalf("a cached key during the outage: %v", err)
		}
		if _, err := r.LookupKey(ctx, store.HashSecret("sg-unknown")); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("an unknown key during the outage: %v, want ErrUnavailable", err)
		}
	}
	if _, err := closed.Admit(ctx, "key_bob", l, store.Take{Requests: 1, Slot: "c1"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("closed policy: %v, want ErrUnavailable", err)
	}
	// For a second after a failure the key's limits are not asked of
	// Redis: a hung Redis would make each call wait for its timeouts.
	if _, err := closed.Admit(ctx, "key_bob", l, store.Take{Requests: 1, Slot: "c2"}); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "less than 1s ago") {
		t.Fatalf("closed policy, again at once: %v, want ErrUnavailable without asking Redis", err)
	}
	// Open: this replica's share of RPM 4 with two replicas is 2.
	for i, want := range []string{"", "", store.LimitRequests} {
		v, err := open.Admit(ctx, "key_bob", l, store.Take{Requests: 1, Slot: string(rune('a' + i))})
		if err != nil || v.Limited != want {
			t.Fatalf("open policy, request %d: %+v %v, want limited %q", i+1, v, err, want)
		}
	}
	// Logged at the first local decision, then at most once per 10s with
	// the counts since.
	if n := strings.Count(logs.String(), "decided by this replica's share"); n != 1 || !strings.Contains(logs.String(), "admitted=1 refused=0") {
		t.Fatalf("%d lines logged for 3 local decisions within 10s, want 1 (admitted=1 refused=0):\n%s", n, logs.String())
	}
	now = now.Add(10 * time.Second)
	if v, err := open.Admit(ctx, "key_bob", l, store.Take{Requests: 1, Slot: "z"}); err != nil || v.Limited != store.LimitRequests {
		t.Fatalf("open policy, request 4: %+v %v", v, err)
	}
	if n := strings.Count(logs.String(), "decided by this replica's share"); n != 2 || !strings.Contains(logs.String(), "admitted=1 refused=2") {
		t.Fatalf("%d lines logged, want a second one 10s later (admitted=1 refused=2):\n%s", n, logs.String())
	}
	// A locally admitted slot settles locally.
	if err := open.Settle(ctx, "key_bob", l, "a", 0); err != nil {
		t.Fatal(err)
	}

	srv.Restart() // empty: the key is gone with the old server's data
	await(t, openEvents, "subscribed")
	now = now.Add(time.Second) // past the second in which a failed key's limits skip Redis
	if _, err := open.LookupKey(ctx, hash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after Redis came back: %v, want the new server's answer, ErrNotFound", err)
	}
	if v, err := open.Admit(ctx, "key_bob", l, store.Take{Requests: 1, Slot: "d"}); err != nil || v.Limited != "" || v.Requests.Remaining != 3 {
		t.Fatalf("limits after Redis came back: %+v %v, want Redis's fresh minute", v, err)
	}
}
