package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// HTTP sequences (Triton's sequence parameters on /generate) across two
// gateway replicas sharing one Redis, in front of two engines, with nginx
// in front of the replicas: a sequence started through one replica
// continues through the other on the engine its START went to (the
// accumulator's running sum proves it); once that engine is gone the
// replica that never saw the sequence answers sequence_lost (409).
func TestReplicasHTTPSequence(t *testing.T) {
	if testing.Short() {
		t.Skip("builds streamgate and runs it as processes")
	}
	bin := buildStreamgate(t)
	rd := redistest.Start(t)
	engA, engB := startEngineProc(t, bin, ""), startEngineProc(t, bin, "")
	ups := engA.addr + "," + engB.addr
	gw := []*sgProcess{
		startGatewayProc(t, bin, ups, "--redis", rd.URL(), "--no-keys"),
		startGatewayProc(t, bin, ups, "--redis", rd.URL(), "--no-keys"),
	}
	ng := startNginx(t, gw[0].addr+";\n    server "+gw[1].addr)
	c := httpClient(t)
	const model = "/v2/models/custom_sequence_int32/generate"
	post := func(base string, id, v int, start, end bool) reply {
		body := fmt.Sprintf(`{"INPUT":[%d],"sequence_id":%d,"sequence_start":%t,"sequence_end":%t}`, v, id, start, end)
		return keyRequest(t, c, "", "POST", base+model, body)
	}

	// Each request of a sequence through another way in: replica 0,
	// replica 1, nginx (either), in turn.
	bases := []string{gw[0].url, gw[1].url, ng.url}
	for i := range 6 {
		id, sum := 100+i, 0
		for j := range 5 {
			v := 10*i + j + 1
			sum += v
			base := bases[(i+j)%len(bases)]
			r := post(base, id, v, j == 0, j == 4)
			if r.status != 200 || !strings.Contains(r.body, fmt.Sprintf(`"OUTPUT":%d`, sum)) {
				t.Fatalf("sequence %d request %d through %s: %d %s, want OUTPUT %d", id, j, base, r.status, r.body, sum)
			}
		}
	}

	// Sequences started through replica 0 until one is on each engine
	// (the route the replicas share names it). Engine A stops: through
	// replica 1, which never saw either, the one on A is lost and the
	// other goes on.
	rc := redis.NewClient(&redis.Options{Addr: rd.Addr})
	defer rc.Close()
	on := map[string]int{}
	for id := 200; id < 240 && len(on) < 2; id++ {
		if r := post(gw[0].url, id, 1, true, false); r.status != 200 {
			t.Fatalf("START %d: %d %s", id, r.status, r.body)
		}
		addr, err := rc.Get(t.Context(), fmt.Sprintf("sg:seq:{custom_sequence_int32//%d}", id)).Result()
		if err != nil {
			t.Fatalf("the route of sequence %d: %v", id, err)
		}
		if _, ok := on[addr]; !ok {
			on[addr] = id
		}
	}
	if len(on) != 2 {
		t.Fatalf("40 sequences started on %v only", on)
	}
	if err := engA.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for addr, id := range on {
		want := `"OUTPUT":3`
		if addr == engA.addr {
			want = "was lost"
		}
		waitFor(t, fmt.Sprintf("sequence %d to be answered through replica 1", id), func() bool {
			r := post(gw[1].url, id, 2, false, false)
			if r.status == 503 && addr == engA.addr { // replica 1 has not seen engine A go yet
				return false
			}
			if !strings.Contains(r.body, want) || (addr == engA.addr) != (r.status == 409) {
				t.Fatalf("sequence %d (on %s) through replica 1: %d %s, want %s", id, addr, r.status, r.body, want)
			}
			return true
		})
	}
}
