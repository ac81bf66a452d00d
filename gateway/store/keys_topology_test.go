package store_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// startRedisProc runs redis-server with args on a free loopback port until
// the test ends and returns its address once it answers PING.
func startRedisProc(t *testing.T, args func(port string) []string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", args(port)...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(t.Context()).Err() != nil {
		select {
		case <-done:
			t.Fatalf("redis-server %v exited: %s", cmd.Args, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server %v does not answer: %s", cmd.Args, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr
}

// testTopology runs the keys and limits tests on s.
func testTopology(t *testing.T, s store.Store) {
	testKeys(t, s)
	l := store.Limit{RPM: 2, TPM: 100, Concurrency: 1}
	for i, want := range []string{"", "", store.LimitRequests} {
		v, err := s.Admit(t.Context(), "key_topo0", l, store.Take{Requests: 1, Tokens: 10})
		if err != nil || v.Limited != want {
			t.Fatalf("admit %d: %+v %v, want %q", i+1, v, err, want)
		}
	}
	if err := s.Settle(t.Context(), "key_topo0", l, "", -5); err != nil {
		t.Fatal(err)
	}
}

// Open's Sentinel form finds the master through a real sentinel.
func TestSentinel(t *testing.T) {
	master := redistest.Start(t)
	_, mport, _ := net.SplitHostPort(master.Addr)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	sentinel := startRedisProc(t, func(port string) []string {
		body := "port " + port + "\nbind 127.0.0.1\ndir " + dir + "\nsentinel monitor mymaster 127.0.0.1 " + mport + " 1\n"
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{conf, "--sentinel"}
	})
	s, err := store.Open("redis://" + sentinel + "/0?master_name=mymaster")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testTopology(t, s)
	// What was written is on the master.
	c := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer c.Close()
	if n, err := c.Exists(t.Context(), "sg:{keys}:by-name").Result(); err != nil || n != 1 {
		t.Fatalf("the master has no keys: %d %v", n, err)
	}
}

// Two replicas on a real Redis Cluster of three masters: every script's
// keys share a slot (hash tags), or Redis would refuse it (CROSSSLOT);
// keys, their revocation, limits, the replica count and the resumable
// stream logs hold across the replicas, with the data spread over the
// masters.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	var rs [2]*store.Redis
	var events [2]<-chan string
	for i := range rs {
		s, err := store.Open(cl.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		rs[i] = s.(*store.Redis)
		if _, ok := rs[i].Client().(*redis.ClusterClient); !ok {
			t.Fatalf("not a cluster client: %T", rs[i].Client())
		}
		events[i] = store.WatchKeys(rs[i])
	}
	a, b := rs[0], rs[1]
	ctx := t.Context()
	testTopology(t, a)

	// Keys: made on a, cached by b, revoked through a: b hears it.
	hash := newKey(t, a, "carol")
	for i, r := range rs {
		if _, err := r.LookupKey(ctx, hash); err != nil {
			t.Fatal(err)
		}
		await(t, events[i], "subscribed")
	}
	if n := store.Replicas(b); n != 2 {
		t.Fatalf("b counts %d replicas, want 2", n)
	}
	if _, err := b.LookupKey(ctx, hash); err != nil || !store.KeyCached(b, hash) {
		t.Fatalf("b did not cache the key: %v", err)
	}
	if err := a.RevokeKey(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	await(t, events[1], "changed")
	if _, err := b.LookupKey(ctx, hash); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b after the revocation: %v, want ErrNotFound", err)
	}

	// Limits: one minute's requests shared by both replicas, for keys
	// whose slots fall on different masters.
	l := store.Limit{RPM: 3, Concurrency: 2}
	for k := range 6 {
		id := "key_cluster" + string(rune('a'+k))
		for i, want := range []string{"", "", "", store.LimitRequests} {
			v, err := rs[i%2].Admit(ctx, id, l, store.Take{Requests: 1})
			if err != nil || v.Limited != want {
				t.Fatalf("%s, request %d: %+v %v, want limited %q", id, i+1, v, err, want)
			}
		}
	}

	// A stream written by a is read and cancelled through b; a hears
	// the cancel.
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	ready, cancelled := make(chan struct{}), make(chan string, 1)
	watched := make(chan error, 1)
	go func() {
		watched <- a.WatchCancels(watchCtx, func() { close(ready) }, func(sid string) { cancelled <- sid })
	}()
	<-ready
	for k := range 6 {
		sid := "cluster-stream-" + string(rune('a'+k))
		_, err := a.AppendStream(ctx, sid, store.Append{Meta: &store.StreamMeta{Owner: "k"}, Renew: true, Holder: "a",
			Lease: time.Minute, TTL: time.Minute, Events: []store.Event{{ID: 1, Data: []byte("x")}, {ID: 2, Data: []byte("y")}}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.ReadStream(ctx, sid, 0, 0, 0)
		if err != nil || len(r.Events) != 2 || string(r.Events[1].Data) != "y" || !r.Live {
			t.Fatalf("%s read through b: %+v %v", sid, r, err)
		}
	}
	if err := b.CancelStream(ctx, "cluster-stream-a"); err != nil {
		t.Fatal(err)
	}
	if sid := <-cancelled; sid != "cluster-stream-a" {
		t.Fatalf("a heard the cancel of %q", sid)
	}
	stop()
	if err := <-watched; err != nil {
		t.Fatal(err)
	}

	// The data is spread over the masters, not on one.
	used := 0
	for _, n := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		if k, err := c.DBSize(ctx).Result(); err == nil && k > 0 {
			used++
		}
		c.Close()
	}
	if used < 2 {
		t.Fatalf("the data is on %d of 3 masters", used)
	}
}
