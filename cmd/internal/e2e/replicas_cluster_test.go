package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// Two gateway replicas with API keys on a Redis Cluster of three masters
// (real redis-server processes, made with redis-cli --cluster create),
// one engine, nginx in front: a resumable stream cut on one replica is
// resumed on the other; a key's requests per minute hold across the
// replicas; with every master hung (SIGSTOP) live streams flow on and
// keyed requests follow each replica's outage policy; a revoked key
// stops working on both. Every multi-key
// operation keeps its keys in one slot (hash tags), or Redis would
// refuse it (CROSSSLOT).
func TestReplicasOnRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds streamgate and runs it as processes")
	}
	dir := storiesDir(t)
	cl := redistest.StartCluster(t, 3)
	url := cl.URL()
	rs := &replicaSet{bin: buildStreamgate(t), c: httpClient(t)}
	rs.eng = startEngineProc(t, rs.bin, dir)
	// Replica 0 keeps limits open while the store fails (the default),
	// replica 1 closed.
	rs.gw[0] = startGatewayProc(t, rs.bin, rs.eng.addr, "--redis", url, "--sse-keepalive", "1s")
	rs.gw[1] = startGatewayProc(t, rs.bin, rs.eng.addr, "--redis", url, "--sse-keepalive", "1s", "--limits-on-store-failure", "closed")
	rs.nginx = startNginx(t, rs.gw[0].addr+";\n    server "+rs.gw[1].addr)
	completion := `{"model":"echo","prompt":"one two three","max_tokens":3}`

	t.Run("resumed on the other replica", func(t *testing.T) {
		secret := createKeyCLI(t, rs.bin, url, "--name", "resume")
		auth := "Bearer " + secret
		whole := rs.open(t, t.Context(), "POST", rs.gw[1].url+"/v1/completions", storiesCompletion, "Authorization", auth).read(t, -1)
		want := completionText(t, datas(whole))
		ctx, cancel := context.WithCancel(t.Context())
		s := rs.open(t, ctx, "POST", rs.gw[0].url+"/v1/completions", storiesCompletion, "Authorization", auth, "Streamgate-Resumable", "true")
		sid := s.resp.Header.Get("Streamgate-Stream-Id")
		first := s.read(t, 20)
		cancel()
		rest := rs.open(t, t.Context(), "GET", rs.nginx.url+"/v1/streams/"+sid, "", "Authorization", auth, "Last-Event-ID", first[len(first)-1].ID).read(t, -1)
		all := append(first, rest...)
		checkIDs(t, all, 1)
		if got := completionText(t, datas(all)); got != want {
			t.Errorf("joined text differs from an uninterrupted run:\n got %q\nwant %q", got, want)
		}
	})

	t.Run("rpm across replicas", func(t *testing.T) {
		secret := createKeyCLI(t, rs.bin, url, "--name", "rpm", "--rpm", "4")
		for i, base := range []string{rs.gw[0].url, rs.gw[1].url, rs.nginx.url, rs.gw[1].url} {
			r := keyRequest(t, rs.c, secret, "POST", base+"/v1/completions", completion)
			if r.status != 200 || r.header.Get("X-Ratelimit-Remaining-Requests") != string(rune('3'-i)) {
				t.Fatalf("request %d on %s: %d remaining %q %s", i+1, base, r.status, r.header.Get("X-Ratelimit-Remaining-Requests"), r.body)
			}
		}
		for _, base := range []string{rs.gw[0].url, rs.gw[1].url} {
			if r := keyRequest(t, rs.c, secret, "POST", base+"/v1/completions", completion); r.status != 429 {
				t.Errorf("5th request on %s: %d %s", base, r.status, r.body)
			}
		}
	})

	t.Run("the cluster hung", func(t *testing.T) {
		// Every master SIGSTOPped under live keyed streams: the streams
		// flow to their end; a cached key is served by the open replica
		// within its share and refused (503) by the closed one; both
		// serve again once the masters continue.
		secret := createKeyCLI(t, rs.bin, url, "--name", "hung", "--rpm", "1000", "--concurrency", "10")
		for _, g := range rs.gw {
			if r := keyRequest(t, rs.c, secret, "POST", g.url+"/v1/completions", completion); r.status != 200 {
				t.Fatalf("before: %s: %d %s", g.url, r.status, r.body)
			}
		}
		const events = 20
		var streams []*sseStream
		var firsts [][]sseEvent
		for _, g := range rs.gw {
			s := rs.open(t, t.Context(), "POST", g.url+"/v2/models/repeat_int32/generate_stream", repeatBody(events, 0, 0, 100),
				"Authorization", "Bearer "+secret, "Streamgate-Resumable", "true")
			streams, firsts = append(streams, s), append(firsts, s.read(t, 1))
		}
		for _, n := range cl.Nodes {
			n.Pause()
		}
		open := keyRequest(t, rs.c, secret, "POST", rs.gw[0].url+"/v1/completions", completion)
		closed := keyRequest(t, rs.c, secret, "POST", rs.gw[1].url+"/v1/completions", completion)
		for _, n := range cl.Nodes {
			n.Continue()
		}
		if open.status != 200 {
			t.Errorf("open replica, the cluster hung: %d %s, want 200", open.status, open.body)
		}
		if closed.status != 503 {
			t.Errorf("closed replica, the cluster hung: %d %s, want 503", closed.status, closed.body)
		}
		for i, s := range streams {
			if got := append(firsts[i], s.read(t, -1)...); len(got) != events {
				t.Errorf("a live stream across the hang: %d events, want %d", len(got), events)
			}
		}
		for _, g := range rs.gw {
			waitFor(t, g.url+" to serve the key again", func() bool {
				return keyRequest(t, rs.c, secret, "POST", g.url+"/v1/completions", completion).status == 200
			})
		}
	})

	t.Run("revoked everywhere", func(t *testing.T) {
		secret := createKeyCLI(t, rs.bin, url, "--name", "revoked")
		for _, base := range []string{rs.gw[0].url, rs.gw[1].url} {
			if r := keyRequest(t, rs.c, secret, "POST", base+"/v1/completions", completion); r.status != 200 {
				t.Fatalf("before revoking, %s: %d %s", base, r.status, r.body)
			}
		}
		if out, err := exec.Command(rs.bin, "keys", "revoke", "--redis", url, "revoked").CombinedOutput(); err != nil {
			t.Fatalf("keys revoke: %v\n%s", err, out)
		}
		for _, base := range []string{rs.gw[0].url, rs.gw[1].url} {
			waitFor(t, "the revocation to reach "+base, func() bool {
				r := keyRequest(t, rs.c, secret, "POST", base+"/v1/completions", completion)
				return r.status == 401 && strings.Contains(r.body, "invalid_api_key")
			})
		}
	})
}
