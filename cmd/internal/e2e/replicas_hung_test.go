package e2e

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// A hung Redis (SIGSTOPped, holding its connections and answering
// nothing) under resumable streams: every live client gets all its
// events and a clean end, whatever the log's fate; once Redis continues
// (SIGCONT) the replica makes and resumes streams again by itself.
func TestReplicaRedisHung(t *testing.T) {
	if testing.Short() {
		t.Skip("builds streamgate and runs it as processes")
	}
	bin := buildStreamgate(t)
	rd := redistest.Start(t)
	eng := startEngineProc(t, bin, "")
	gw := startGatewayProc(t, bin, eng.addr, "--redis", rd.URL(), "--no-keys")
	c := httpClient(t)
	const n, events = 4, 30
	body := repeatBody(events, 0, 0, 50)
	type result struct {
		events int
		last   string
		err    error
	}
	results := make(chan result, n)
	started := make(chan struct{}, n)
	for range n {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, gw.url+"/v2/models/repeat_int32/generate_stream", strings.NewReader(body))
		req.Header.Set("Streamgate-Resumable", "true")
		resp, err := c.Do(req)
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Streamgate-Stream-Id") == "" {
			t.Fatalf("resumable stream: %v %v", resp, err)
		}
		go func() {
			defer resp.Body.Close()
			r := result{}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					if r.events++; r.events == 1 {
						started <- struct{}{}
					}
					r.last = d
				}
			}
			r.err = sc.Err()
			results <- r
		}()
	}
	for range n {
		<-started
	}
	rd.Pause()
	for range n {
		r := <-results
		if r.err != nil || r.events != events || strings.Contains(r.last, "error") {
			t.Errorf("a live stream while Redis hung: %d events of %d, last %s, %v", r.events, events, r.last, r.err)
		}
	}
	rd.Continue()

	// The replica recovers: a stream cut after 5 events resumes from the
	// log.
	rs := &replicaSet{c: c}
	waitFor(t, "a resumable stream to be logged again", func() bool {
		s := rs.open(t, t.Context(), "POST", gw.url+"/v2/models/repeat_int32/generate_stream", repeatBody(10, 0, 0, 0), "Streamgate-Resumable", "true")
		sid := s.resp.Header.Get("Streamgate-Stream-Id")
		first := s.read(t, -1)
		s.resp.Body.Close()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, gw.url+"/v1/streams/"+sid, nil)
		req.Header.Set("Last-Event-ID", "5")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return false // written while the pool still held dead connections
		}
		rest := (&sseStream{resp: resp, r: newSSEReader(resp.Body)}).read(t, -1)
		if len(rest) != len(first)-5 || rest[0].ID != "6" {
			t.Fatalf("resumed after 5: %d events from id %s, want %d from 6", len(rest), rest[0].ID, len(first)-5)
		}
		return true
	})
}
