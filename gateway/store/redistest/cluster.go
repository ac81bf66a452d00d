package redistest

import (
	"bufio"
	"context"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of real redis-server processes, made with
// redis-cli --cluster create: masters sharing the slots, and replicas
// that follow them.
type Cluster struct {
	Nodes []*Server // every node: masters first, as created
}

// StartCluster starts n redis-servers in cluster mode on free ports and
// joins them into one cluster of masters whose slots they share; it
// returns once every node says the cluster is ok. It needs redis-cli
// beside redis-server.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterReplicas(t, n, 0)
}

// StartClusterReplicas is StartCluster with replicas replicas of each
// master (redis-cli's --cluster-replicas). It returns once every node
// says the cluster is ok and every replica is in sync with its master.
func StartClusterReplicas(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	need(t, "redis-server")
	need(t, "redis-cli")
	c := &Cluster{}
	args := []string{"--cluster", "create"}
	for range masters * (1 + replicas) {
		// A node timeout far beyond any pause a test makes: a replica
		// takes over only when the test asks it to (Failover).
		s := start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "60000")
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.wait(t, "the cluster to be ok with its replicas in sync", func() bool {
		synced := 0
		for _, s := range c.Nodes {
			if !clusterOK(s.Addr) {
				return false
			}
			if info(s.Addr, "replication")["master_link_status"] == "up" {
				synced++
			}
		}
		return synced == masters*replicas
	})
	return c
}

// wait polls cond every 50 ms until it holds, failing t after a minute.
func (c *Cluster) wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: timed out after a minute waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Masters are the nodes that are masters now.
func (c *Cluster) Masters() []*Server {
	var out []*Server
	for _, s := range c.Nodes {
		if info(s.Addr, "replication")["role"] == "master" {
			out = append(out, s)
		}
	}
	return out
}

// Node is the node at addr (host:port), nil if none is.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Failover makes a replica of master take its place (CLUSTER FAILOVER,
// the coordinated manual failover: no write is lost), and returns the
// new master once it is master, the old one follows it, and the
// cluster is ok on every node.
func (c *Cluster) Failover(t testing.TB, master *Server) *Server {
	t.Helper()
	var replica *Server
	for _, s := range c.Nodes {
		r := info(s.Addr, "replication")
		if r["role"] == "slave" && net.JoinHostPort(r["master_host"], r["master_port"]) == master.Addr {
			replica = s
			break
		}
	}
	if replica == nil {
		t.Fatalf("redistest: %s has no replica", master.Addr)
	}
	if reply := command(replica.Addr, "CLUSTER FAILOVER"); reply != "+OK" {
		t.Fatalf("redistest: CLUSTER FAILOVER on %s: %s", replica.Addr, reply)
	}
	asked := time.Now()
	c.wait(t, "the failover of "+master.Addr+" to "+replica.Addr, func() bool {
		if info(replica.Addr, "replication")["role"] != "master" {
			// Redis aborts a manual failover that has not completed
			// within its fixed 5 s (CLUSTER_MF_TIMEOUT), which a loaded
			// box can exceed; the replica then stays a replica until it
			// is asked again.
			if time.Since(asked) > 6*time.Second {
				// An error here is the replica promoted in between: the
				// next look sees it.
				reply := command(replica.Addr, "CLUSTER FAILOVER")
				t.Logf("redistest: the failover of %s had not completed in 6 s; asked %s again: %s", master.Addr, replica.Addr, reply)
				asked = time.Now()
			}
			return false
		}
		if info(master.Addr, "replication")["role"] != "slave" {
			return false
		}
		for _, s := range c.Nodes {
			if !clusterOK(s.Addr) {
				return false
			}
		}
		return true
	})
	return replica
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
	return info(addr, "")["cluster_state"] == "ok"
}

// info is the fields of the node at addr's INFO section (CLUSTER INFO
// for ""), empty when it does not answer within a second.
func info(addr, section string) map[string]string {
	cmd := "CLUSTER INFO"
	if section != "" {
		cmd = "INFO " + section
	}
	out := map[string]string{}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return out
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return out
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return out
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 {
		return out
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return out
	}
	for line := range strings.Lines(string(body)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// command sends one inline command to the node at addr and returns its
// reply's first line.
func command(addr, cmd string) string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return err.Error()
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(line)
}
