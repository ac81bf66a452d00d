package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// The issue-31 deployment under faults: three gateway replicas behind
// nginx, a Redis Cluster of three masters with a replica each (real
// redis-server processes), two engines; N concurrent resumable streams
// made with API keys that have limits, one per 100 streams (N is
// STREAMGATE_CLUSTER_STREAMS, default 120; the full-size run is 2000).
// Each stream is a repeat_int32 generate_stream, so every event says
// which it is. While they run:
//
//   - one replica is killed (SIGKILL) once every stream is under way:
//     its clients resume through nginx on the others and get, after the
//     last event they saw, what the dead replica had logged, then
//     stream_lost (its engine request died with it), or 404 when it died
//     before any of the stream's log reached Redis: never an event
//     twice, never a gap;
//   - a quarter of the other streams' clients drop their connection a
//     third of the way through and resume through nginx: they get the
//     whole stream, each event once;
//   - the master holding one key's limits is stopped (SIGSTOP) for 5 s:
//     the live streams flow on; that key's requests are served by the
//     replica whose limits fail open and refused (503) by the one whose
//     limits fail closed;
//   - another master fails over to its replica (CLUSTER FAILOVER).
//
// Every live client of a surviving replica gets every event once, in
// order (0 lost). The test logs the lost events, the resume latency
// (p50/p99) and the Redis commands per event on the masters.
func TestReplicasClusterFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds streamgate and runs it as processes")
	}
	n := 120
	if v := os.Getenv("STREAMGATE_CLUSTER_STREAMS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 12 {
			t.Fatalf("STREAMGATE_CLUSTER_STREAMS=%q: want a number of streams, 12 or more", v)
		}
	}
	// Streams long enough to be under way through every fault: about
	// 15 s at 120 streams, longer with more (they take longer to open).
	events, delay := 60+n/10, 250

	cl := redistest.StartClusterReplicas(t, 3, 1)
	url := cl.URL()
	bin := buildStreamgate(t)
	ups := startEngineProc(t, bin, "").addr + "," + startEngineProc(t, bin, "").addr
	gw := []*sgProcess{
		startGatewayProc(t, bin, ups, "--redis", url),
		startGatewayProc(t, bin, ups, "--redis", url), // the one killed
		startGatewayProc(t, bin, ups, "--redis", url, "--limits-on-store-failure", "closed"),
	}
	const victim = 1
	ng := startNginx(t, gw[0].addr+";\n    server "+gw[1].addr+";\n    server "+gw[2].addr)
	c := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}}
	t.Cleanup(c.CloseIdleConnections)

	// A key per 100 streams (4 at least): a replica lets one key have
	// --max-streams-per-conn (64) requests in flight.
	var secrets []string
	keys := max(4, n/100)
	for i := range keys {
		secrets = append(secrets, createKeyCLI(t, bin, url, "--name", fmt.Sprintf("k%d", i),
			"--concurrency", strconv.Itoa(n/keys+10), "--rpm", strconv.Itoa(50*n/keys+1000))) // room for the resumes and their retries
	}
	// The outage key: one whose limits live on the master that also
	// holds every key's record and the key-change channel ({keys}), so
	// that stopping that master takes keys, limits and revocation away
	// at once. Key ids are random: one in three lands there.
	keysMaster := masterOf(t, cl, "sg:{keys}:by-hash")
	var outage string
	for i := 0; outage == ""; i++ {
		if i == 40 {
			t.Fatal("40 keys, none with its limits on the {keys} master")
		}
		secret := createKeyCLI(t, bin, url, "--name", fmt.Sprintf("outage%d", i), "--rpm", "1000")
		if masterOf(t, cl, "sg:{"+keyID(t, url, secret)+"}:rpm") == keysMaster {
			outage = secret
		}
	}
	// Every replica caches the key: it listens to key changes (a key
	// is cached only then), and has validated it once since.
	waitFor(t, "every replica to listen to key changes", func() bool {
		for _, g := range gw {
			keyRequest(t, c, outage, "GET", g.url+"/v1/models", "")
		}
		return keyListeners(t, cl) == len(gw)
	})
	const completion = `{"model":"echo","prompt":"one two three","max_tokens":3}`
	for _, g := range gw {
		if r := keyRequest(t, c, outage, "POST", g.url+"/v1/completions", completion); r.status != 200 {
			t.Fatalf("%s: %d %s", g.url, r.status, r.body)
		}
	}

	cmds := &clusterCommands{cl: cl}
	cmds.start(t)
	var run clusterRun
	run.started.Add(n)
	streams := make([]*faultStream, n)
	var wg sync.WaitGroup
	for i := range streams {
		s := &faultStream{run: &run, c: c, events: events, secret: secrets[i%len(secrets)], gw: i % len(gw), resumeAt: -1}
		s.victim = s.gw == victim
		if s.gw != victim && i%4 == 0 {
			s.resumeAt = events / 3
		}
		streams[i] = s
		wg.Go(func() { s.follow(t.Context(), gw[s.gw].url, ng.url, repeatBody(events, 0, 0, delay)) })
	}
	run.started.Wait()
	t.Logf("%d streams under way", n)

	// A replica dies: its clients resume through nginx.
	if err := gw[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}

	// A master stops for 5 s: the one holding the outage key and its
	// limits.
	paused := keysMaster
	live := run.live.Load()
	paused.Pause()
	pausedAt := time.Now()
	var open, closed reply
	var answered sync.WaitGroup
	var openIn, closedIn time.Duration
	answered.Go(func() {
		open = keyRequest(t, c, outage, "POST", gw[0].url+"/v1/completions", completion)
		openIn = time.Since(pausedAt)
	})
	answered.Go(func() {
		closed = keyRequest(t, c, outage, "POST", gw[2].url+"/v1/completions", completion)
		closedIn = time.Since(pausedAt)
	})
	answered.Wait()
	waitFor(t, "live streams to flow while a master is stopped", func() bool { return run.live.Load() > live })
	<-time.After(time.Until(pausedAt.Add(5 * time.Second))) // the fault lasts 5 s; nothing waits on it
	flowed := run.live.Load() - live
	paused.Continue()
	t.Logf("a master stopped for %v; a keyed request answered in %v on the open replica, %v on the closed one", time.Since(pausedAt), openIn, closedIn)
	if open.status != 200 {
		t.Errorf("the open replica, its key's master stopped: %d %s, want 200", open.status, open.body)
	}
	if closed.status != 503 {
		t.Errorf("the closed replica, its key's master stopped: %d %s, want 503", closed.status, closed.body)
	}

	// Another master fails over to its replica.
	var other *redistest.Server
	for _, m := range cl.Masters() {
		if m != paused {
			other = m
			break
		}
	}
	cmds.stop(t, &run)
	cl.Failover(t, other)
	cmds.start(t)

	wg.Wait()
	cmds.stop(t, &run)

	var lost, dups, complete, lostStreams, unstored, cut int
	var latency, lostAfter []time.Duration
	for i, s := range streams {
		if s.err != nil {
			t.Errorf("stream %d (replica %d): %v", i, s.gw, s.err)
			continue
		}
		dups += s.dups
		latency = append(latency, s.latency...)
		if s.cut {
			cut++
			if s.gw != victim && s.resumeAt < 0 {
				t.Errorf("stream %d: the live client of replica %d, which runs on, was cut after %d events", i, s.gw, s.liveEvents)
			}
		}
		switch {
		case len(s.got) == events:
			complete++
		case s.gw == victim && s.lost:
			lostStreams++
			if s.unstored {
				unstored++
			}
			lostAfter = append(lostAfter, s.lostAfter)
		default:
			lost += events - len(s.got)
			t.Errorf("stream %d %s (replica %d): %d events of %d, lost %t; the replicas' lines about it:\n%s",
				i, s.sid, s.gw, len(s.got), events, s.lost, linesWith(s.sid, gw...))
		}
	}
	if dups != 0 {
		t.Errorf("%d events came twice", dups)
	}
	if cut == 0 {
		t.Errorf("no stream was cut: the faults hit nothing")
	}
	if flowed == 0 {
		t.Errorf("no event reached a live client while the master was stopped")
	}
	t.Logf("%d streams of %d events: %d complete, %d of the killed replica's ended with stream_lost (after %s; %d of them never stored: 404); %d cut and resumed; lost events of live clients: %d; duplicates: %d",
		n, events, complete, lostStreams, quantiles(lostAfter), unstored, cut, lost, dups)
	t.Logf("resume latency (request to first event): %s; %d events reached live clients while a master was stopped",
		quantiles(latency), flowed)
	t.Logf("Redis commands on the masters: %d for %d events: %.3f per event", cmds.total, cmds.events, float64(cmds.total)/float64(cmds.events))
}

// clusterRun is what the streams of TestReplicasClusterFaults share.
type clusterRun struct {
	started sync.WaitGroup // each stream's first event
	live    atomic.Int64   // events read by clients on their first connection
	all     atomic.Int64   // events read by clients, resumed or not
}

// clusterCommands adds up the commands the masters ran over windows
// (INFO total_commands_processed): a replica's count includes what it
// replicates, and a failover swaps roles, so a window is taken between
// failovers, on the masters of its start.
type clusterCommands struct {
	cl      *redistest.Cluster
	masters []*redistest.Server
	at      []int64
	from    int64 // run.all at the window's start
	total   int64
	events  int64
}

func (m *clusterCommands) start(t *testing.T) {
	m.masters, m.at = m.cl.Masters(), nil
	for _, s := range m.masters {
		m.at = append(m.at, s.CommandsProcessed(t))
	}
}

func (m *clusterCommands) stop(t *testing.T, run *clusterRun) {
	for i, s := range m.masters {
		m.total += s.CommandsProcessed(t) - m.at[i]
	}
	all := run.all.Load()
	m.events += all - m.from
	m.from = all
}

// faultStream is one client of TestReplicasClusterFaults: it reads a
// resumable stream from one replica and resumes it through nginx when
// its connection ends early (or at event resumeAt, by itself).
type faultStream struct {
	run      *clusterRun
	c        *http.Client
	events   int
	secret   string
	gw       int
	resumeAt int // cut the connection after this many events; -1: never

	sid        string
	got        []int // OUT of each event, in order
	dups       int   // events that came again
	cut        bool  // the first connection ended early
	liveEvents int   // events read on the first connection
	lost       bool  // ended by stream_lost
	unstored   bool  // lost, and never stored: 404
	victim     bool  // its replica is the one killed

	lostAfter time.Duration   // from the cut to stream_lost
	latency   []time.Duration // of each resume, request to first event
	err       error
}

var outRE = regexp.MustCompile(`"OUT":(-?\d+)\b`)

func (s *faultStream) follow(ctx context.Context, base, lb, body string) {
	var once sync.Once
	started := func() { once.Do(s.run.started.Done) }
	defer started()
	first, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := s.request(first, "POST", base+"/v2/models/repeat_int32/generate_stream", body, "Streamgate-Resumable", "true")
	if err != nil {
		s.err = err
		return
	}
	s.sid = resp.Header.Get("Streamgate-Stream-Id")
	r := newSSEReader(resp.Body)
	for s.resumeAt < 0 || len(s.got) < s.resumeAt {
		ev, err := r.next()
		if err == io.EOF && len(s.got) == s.events {
			return
		}
		if err != nil {
			break // cut: resume
		}
		if s.err = s.add(ev); s.err != nil {
			return
		}
		s.run.live.Add(1)
		started()
	}
	cancel()
	resp.Body.Close()
	s.cut, s.liveEvents = true, len(s.got)
	if len(s.got) == 0 {
		s.err = errors.New("cut before its first event")
		return
	}
	s.resume(ctx, lb)
}

// resume follows the stream through lb after the last event seen, as
// EventSource does, reconnecting while the answer is 503 or the
// connection fails, until the stream ends.
func (s *faultStream) resume(ctx context.Context, lb string) {
	cutAt := time.Now()
	for {
		sent := time.Now()
		resp, err := s.request(ctx, "GET", lb+"/v1/streams/"+s.sid, "", "Last-Event-ID", strconv.Itoa(len(s.got)))
		var status *statusError
		switch {
		case errors.As(err, &status) && status.code == http.StatusNoContent:
			if len(s.got) != s.events {
				s.err = fmt.Errorf("204 (the stream is over) after %d events of %d", len(s.got), s.events)
			}
			return
		case errors.As(err, &status) && status.code == http.StatusNotFound && s.victim:
			// Killed before any write of its log reached Redis (the
			// first write is tried, not awaited, before the stream
			// id goes out): nothing of it was ever stored.
			s.lost, s.unstored, s.lostAfter = true, true, time.Since(cutAt)
			return
		case errors.As(err, &status) && status.code != http.StatusServiceUnavailable:
			s.err = err
			return
		case err != nil:
			if ctx.Err() != nil {
				s.err = err
				return
			}
			reconnectDelay(ctx)
			continue
		}
		r := newSSEReader(resp.Body)
		failed := false
		for first := true; !failed; first = false {
			ev, err := r.next()
			if err != nil {
				break // an end or a cut: reconnect (204 once it is over)
			}
			if failed = strings.Contains(ev.Data, "shared store is unavailable"); failed {
				break // the store failed while the stream was read: reconnect
			}
			if first && !strings.Contains(ev.Data, `"error"`) {
				s.latency = append(s.latency, time.Since(sent))
			}
			if strings.Contains(ev.Data, "the stream was lost") {
				s.lost, s.lostAfter = true, time.Since(cutAt)
				resp.Body.Close()
				return
			}
			if s.err = s.add(ev); s.err != nil {
				resp.Body.Close()
				return
			}
		}
		resp.Body.Close()
		if failed {
			reconnectDelay(ctx)
		}
	}
}

// reconnectDelay is EventSource's wait before it reconnects.
func reconnectDelay(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}

// add takes the next event: its id must follow the last, its OUT be its
// index; one seen before is counted as a duplicate.
func (s *faultStream) add(ev sseEvent) error {
	m := outRE.FindStringSubmatch(ev.Data)
	if m == nil {
		return fmt.Errorf("event %q after %d", ev.Data, len(s.got))
	}
	out, _ := strconv.Atoi(m[1])
	if out < len(s.got) {
		s.dups++
		return nil
	}
	if out != len(s.got) || ev.ID != strconv.Itoa(out+1) {
		return fmt.Errorf("event id %s OUT %d after %d events", ev.ID, out, len(s.got))
	}
	s.got = append(s.got, out)
	s.run.all.Add(1)
	return nil
}

type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.code, e.body) }

// request sends a keyed request; another status than 200 is a
// *statusError.
func (s *faultStream) request(ctx context.Context, method, url, body string, header ...string) (*http.Response, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.secret)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := s.c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, &statusError{resp.StatusCode, string(b)}
	}
	return resp, nil
}

// linesWith is the output lines of ps that contain s.
func linesWith(s string, ps ...*sgProcess) string {
	var b strings.Builder
	for i, p := range ps {
		for line := range strings.Lines(p.out.String()) {
			if strings.Contains(line, s) {
				fmt.Fprintf(&b, "%d: %s", i, line)
			}
		}
	}
	return b.String()
}

// keyID is the id of the key whose secret is secret.
func keyID(t *testing.T, url, secret string) string {
	t.Helper()
	st, err := store.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k, err := st.LookupKey(t.Context(), store.HashSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}

// masterOf is the master holding key's slot.
func masterOf(t *testing.T, cl *redistest.Cluster, key string) *redistest.Server {
	t.Helper()
	var addrs []string
	for _, s := range cl.Nodes {
		addrs = append(addrs, s.Addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	m, err := cc.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	s := cl.Node(m.Options().Addr)
	if s == nil {
		t.Fatalf("the master of %s, %s, is not a node of the cluster", key, m.Options().Addr)
	}
	return s
}

// keyListeners is how many clients listen to key changes, on every
// node of cl (a Cluster client subscribes on one).
func keyListeners(t *testing.T, cl *redistest.Cluster) int {
	t.Helper()
	const channel = "sg:{keys}:changed"
	n := 0
	for _, s := range cl.Nodes {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr})
		m, err := rc.PubSubNumSub(t.Context(), channel).Result()
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		n += int(m[channel])
	}
	return n
}

// quantiles is "p50 X, p99 Y, max Z" of ds.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	at := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return fmt.Sprintf("p50 %v, p99 %v, max %v (%d)", at(0.5), at(0.99), ds[len(ds)-1], len(ds))
}
