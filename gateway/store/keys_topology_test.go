package store_test

import (
	"context"
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

// Open's Cluster form works on a real (one-node) cluster: every script's
// keys share a slot (hash tags), or Redis would refuse it (CROSSSLOT).
func TestCluster(t *testing.T) {
	redistest.Start(t) // skips, or fails in CI, without redis-server
	dir := t.TempDir()
	node := startRedisProc(t, func(port string) []string {
		return []string{"--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--dir", dir, "--save", "", "--appendonly", "no"}
	})
	c := redis.NewClient(&redis.Options{Addr: node})
	defer c.Close()
	if err := c.Do(t.Context(), "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, port, _ := net.SplitHostPort(node)
	// Two addresses make the Cluster form; the second is the same node.
	s, err := store.Open("redis://" + node + "?addr=localhost:" + port)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*store.Redis).Client().(*redis.ClusterClient); !ok {
		t.Fatalf("not a cluster client: %T", s.(*store.Redis).Client())
	}
	testTopology(t, s)
}
