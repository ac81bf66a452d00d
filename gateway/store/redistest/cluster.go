package redistest

import (
	"bufio"
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of real redis-server processes (masters
// only), made with redis-cli --cluster create.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts n redis-servers in cluster mode on free ports and
// joins them into one cluster whose slots they share; it returns once
// every node says the cluster is ok. It needs redis-cli beside
// redis-server.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	need(t, "redis-server")
	need(t, "redis-cli")
	c := &Cluster{}
	args := []string{"create"}
	for range n {
		s := start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "15000")
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.Command("redis-cli", append([]string{"--cluster"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range c.Nodes {
		for !clusterOK(s.Addr) {
			select {
			case <-ctx.Done():
				t.Fatalf("the cluster is not ok on %s after a minute", s.Addr)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return c
}

// URL is the cluster's redis:// URL, naming every node (store.Open's
// Cluster form).
func (c *Cluster) URL() string {
	u := "redis://" + c.Nodes[0].Addr
	for i, s := range c.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + s.Addr
	}
	return u
}

// clusterOK reports whether the node at addr says cluster_state:ok.
func clusterOK(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("CLUSTER INFO\r\n")); err != nil {
		return false
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return false
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			return v == "ok"
		}
	}
}
