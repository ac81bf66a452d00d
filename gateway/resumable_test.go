package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/resume"
	"github.com/streamgate/streamgate/gateway/sse"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
	"github.com/streamgate/streamgate/upstream"
	"github.com/streamgate/streamgate/upstream/upstreamtest"
)

// eachStore runs f on the in-process store and on a real redis-server.
func eachStore(t *testing.T, f func(t *testing.T, st store.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, store.NewMemory()) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		st, err := store.Open(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f(t, st)
	})
}

// resumeRig is a gateway whose upstream calls the test feeds, served over
// loopback HTTP, with the X-Test-Key header standing in for an API key
// (core.WithLimitKey).
type resumeRig struct {
	t     *testing.T
	url   string
	calls chan *rigCall
}

// rigCall is one upstream call: the test sends its responses and ends
// it; ctx is the call's context.
type rigCall struct {
	f   *upstream.Feed
	ctx context.Context
}

func (c *rigCall) send(r *pb.ModelInferResponse) { c.f.Send(r) }
func (c *rigCall) end()                          { c.f.End(io.EOF) }

func newResumeRig(t *testing.T, opts *Options) *resumeRig {
	rig := &resumeRig{t: t, calls: make(chan *rigCall, 16)}
	start := upstreamtest.Client(func(ctx context.Context, _ *pb.ModelInferRequest, f *upstream.Feed) error {
		rig.calls <- &rigCall{f, ctx}
		return nil
	})
	if opts == nil {
		opts = &Options{}
	}
	if opts.SSE == nil {
		opts.SSE = &sse.Options{KeepAlive: 50 * time.Millisecond} // headers go out before the first response
	}
	srv := testServer(start, fakeUpstream{}, opts)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := r.Header.Get("X-Test-Key"); k != "" {
			r = r.WithContext(core.WithLimitKey(r.Context(), k))
		}
		srv.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	rig.url = hs.URL
	return rig
}

func (rig *resumeRig) call() *rigCall {
	select {
	case c := <-rig.calls:
		return c
	case <-time.After(10 * time.Second):
		rig.t.Fatal("no upstream call")
		return nil
	}
}

func repeatResp(i int) *pb.ModelInferResponse {
	r := &pb.ModelInferResponse{ModelName: "repeat_int32", ModelVersion: "1"}
	tensor.ToResponse(r, []*tensor.Tensor{tensor.NewInt32("OUT", []int64{1}, []int32{int32(i)}), tensor.NewUint32("IDX", []int64{1}, []uint32{uint32(i)})})
	return r
}

// stream is an open event stream.
type rigStream struct {
	resp *http.Response
	r    *sse.Reader
}

func (rig *resumeRig) do(method, path, key string, header map[string]string, body string) *http.Response {
	rig.t.Helper()
	req, err := http.NewRequest(method, rig.url+path, strings.NewReader(body))
	if err != nil {
		rig.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-Test-Key", key)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		rig.t.Fatal(err)
	}
	rig.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// events reads n events ("id:data" each).
func (s *rigStream) events(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		ev, err := s.r.Next()
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		if !ev.IsComment {
			out = append(out, ev.ID+":"+ev.Data)
		}
	}
	return out
}

// rest reads events to the end of the stream.
func (s *rigStream) rest(t *testing.T) []string {
	t.Helper()
	var out []string
	for {
		ev, err := s.r.Next()
		if err != nil {
			return out
		}
		if !ev.IsComment {
			out = append(out, ev.ID+":"+ev.Data)
		}
	}
}

func open(resp *http.Response) *rigStream {
	return &rigStream{resp: resp, r: sse.NewReader(bufio.NewReader(resp.Body))}
}

const repeatBody = `{"IN":[1],"DELAY":[0],"WAIT":0}`

func wantEvent(id, i int) string {
	return fmt.Sprintf(`%d:{"model_name":"repeat_int32","model_version":"1","OUT":%d,"IDX":%d}`, id, i, i)
}

// A resumable stream's client leaves after three events; the request runs
// on; GET /v1/streams/{sid} with Last-Event-ID gives the rest, each once,
// ids continuing; reading after the end answers 204; another key gets
// 404.
func TestResumableStreamResumes(t *testing.T) { eachStore(t, testResumableStreamResumes) }

func testResumableStreamResumes(t *testing.T, st store.Store) {
	rig := newResumeRig(t, &Options{Store: st})
	resp := rig.do("POST", "/v2/models/repeat_int32/generate_stream", "k1", map[string]string{core.HeaderResumable: "true"}, repeatBody)
	c := rig.call()
	sid := resp.Header.Get(core.HeaderStreamID)
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("POST: %d, stream id %q", resp.StatusCode, sid)
	}
	for i := range 3 {
		c.send(repeatResp(i))
	}
	s := open(resp)
	if got := s.events(t, 3); strings.Join(got, "\n") != strings.Join([]string{wantEvent(1, 0), wantEvent(2, 1), wantEvent(3, 2)}, "\n") {
		t.Fatalf("first events: %q", got)
	}
	resp.Body.Close()
	for i := 3; i < 5; i++ {
		c.send(repeatResp(i))
	}
	if got := rig.do("GET", "/v1/streams/"+sid, "k2", nil, ""); got.StatusCode != 404 {
		t.Errorf("GET with another key: %d", got.StatusCode)
	}
	if got := rig.do("GET", "/v1/streams/"+sid, "", nil, ""); got.StatusCode != 404 {
		t.Errorf("GET without a key: %d", got.StatusCode)
	}
	if got := rig.do("DELETE", "/v1/streams/"+sid, "k2", nil, ""); got.StatusCode != 404 {
		t.Errorf("DELETE with another key: %d", got.StatusCode)
	}
	r2 := rig.do("GET", "/v1/streams/"+sid, "k1", map[string]string{core.HeaderLastEvent: "3"}, "")
	if r2.StatusCode != 200 || !strings.HasPrefix(r2.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(r2.Body)
		t.Fatalf("GET: %d %s %s", r2.StatusCode, r2.Header.Get("Content-Type"), b)
	}
	s2 := open(r2)
	if got := s2.events(t, 2); got[0] != wantEvent(4, 3) || got[1] != wantEvent(5, 4) {
		t.Fatalf("resumed events: %q", got)
	}
	c.send(repeatResp(5))
	c.end()
	if got := s2.rest(t); len(got) != 1 || got[0] != wantEvent(6, 5) {
		t.Fatalf("live events: %q", got)
	}
	// From the start, with the query parameter: every event once.
	all := open(rig.do("GET", "/v1/streams/"+sid+"?last_event_id=0", "k1", nil, "")).rest(t)
	if len(all) != 6 || all[5] != wantEvent(6, 5) {
		t.Fatalf("whole stream: %q", all)
	}
	// After the last event, at the end event (7) or past it, up to the
	// largest id (no overflow into "trimmed"): 204, at once.
	for _, after := range []string{"6", "7", "100", "18446744073709551615"} {
		if got := rig.do("GET", "/v1/streams/"+sid, "k1", map[string]string{core.HeaderLastEvent: after}, ""); got.StatusCode != 204 {
			t.Errorf("GET after %s, after the end: %d", after, got.StatusCode)
		}
	}
	if got := rig.do("GET", "/v1/streams/"+sid, "k1", map[string]string{core.HeaderLastEvent: "x"}, ""); got.StatusCode != 400 {
		t.Errorf("GET with a bad Last-Event-ID: %d", got.StatusCode)
	}
	if got := rig.do("GET", "/v1/streams/nosuch", "k1", nil, ""); got.StatusCode != 404 {
		t.Errorf("GET of no stream: %d", got.StatusCode)
	}
}

// DELETE /v1/streams/{sid} cancels the request upstream, also while its
// client is connected.
func TestResumableStreamDelete(t *testing.T) { eachStore(t, testResumableStreamDelete) }

func testResumableStreamDelete(t *testing.T, st store.Store) {
	rig := newResumeRig(t, &Options{Store: st})
	resp := rig.do("POST", "/v2/models/repeat_int32/generate_stream", "", map[string]string{core.HeaderResumable: "true"}, repeatBody)
	c := rig.call()
	c.send(repeatResp(0))
	live := open(resp)
	live.events(t, 1)
	sid := resp.Header.Get(core.HeaderStreamID)
	if got := rig.do("DELETE", "/v1/streams/"+sid, "", nil, ""); got.StatusCode != 204 {
		t.Fatalf("DELETE: %d", got.StatusCode)
	}
	select {
	case <-c.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call was not cancelled")
	}
	// The live client, and every reader after it, sees the cancel as an
	// error event (Triton's shape here) with the end event's id, 2; a
	// reader already past it gets 204, which stops an EventSource.
	const cancelled = `2:{"error":"cancelled: the stream was cancelled, by DELETE /v1/streams/{sid} or for want of a reader within the grace period"}`
	if got := live.rest(t); len(got) != 1 || got[0] != cancelled {
		t.Errorf("the live client after DELETE: %q", got)
	}
	if got := open(rig.do("GET", "/v1/streams/"+sid, "", nil, "")).rest(t); len(got) != 2 || got[0] != wantEvent(1, 0) || got[1] != cancelled {
		t.Errorf("a reader from the start: %q", got)
	}
	if got := open(rig.do("GET", "/v1/streams/"+sid, "", map[string]string{core.HeaderLastEvent: "1"}, "")).rest(t); len(got) != 1 || got[0] != cancelled {
		t.Errorf("a reader after the last event: %q", got)
	}
	if got := rig.do("GET", "/v1/streams/"+sid, "", map[string]string{core.HeaderLastEvent: "2"}, ""); got.StatusCode != 204 {
		t.Errorf("a reader after the cancel event: %d", got.StatusCode)
	}
}

// A resumable stream whose client left and that nobody resumes is
// cancelled after the grace period; one that is not resumable is
// cancelled at once.
func TestResumableStreamGrace(t *testing.T) {
	rig := newResumeRig(t, &Options{ResumeGrace: 200 * time.Millisecond})
	for _, resumable := range []string{"true", "false"} {
		resp := rig.do("POST", "/v2/models/repeat_int32/generate_stream", "", map[string]string{core.HeaderResumable: resumable}, repeatBody)
		c := rig.call()
		c.send(repeatResp(0))
		open(resp).events(t, 1)
		left := time.Now()
		resp.Body.Close()
		select {
		case <-c.ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the call was not cancelled")
		}
		if resumable == "true" && time.Since(left) < 200*time.Millisecond {
			t.Errorf("resumable stream cancelled %v after its client left", time.Since(left))
		}
	}
}

func TestResumableModes(t *testing.T) {
	for mode, want := range map[string][2]bool{ResumableNever: {false, false}, ResumableOptIn: {false, true}, ResumableAlways: {true, true}} {
		rig := newResumeRig(t, &Options{Resumable: mode})
		for i, asked := range []string{"", "true"} {
			resp := rig.do("POST", "/v2/models/repeat_int32/generate_stream", "", map[string]string{core.HeaderResumable: asked}, repeatBody)
			rig.call().end()
			if got := resp.Header.Get(core.HeaderStreamID) != ""; got != want[i] {
				t.Errorf("%s, asked %q: resumable %v", mode, asked, got)
			}
		}
	}
	rig := newResumeRig(t, nil)
	if resp := rig.do("POST", "/v2/models/repeat_int32/generate_stream", "", map[string]string{core.HeaderResumable: "maybe"}, repeatBody); resp.StatusCode != 400 {
		t.Errorf("Streamgate-Resumable: maybe: %d", resp.StatusCode)
	}
}

var lastEventIDCases = []struct {
	header, query string
	want          uint64
	bad           bool
}{
	{"", "", 0, false},
	{"7", "", 7, false},
	{"", "12", 12, false},
	{"3", "12", 3, false}, // the header wins
	{" 4 ", "", 4, false},
	{"18446744073709551615", "", 18446744073709551615, false},
	{"18446744073709551616", "", 0, true},
	{"-1", "", 0, true},
	{"", "x", 0, true},
	{"1.5", "", 0, true},
}

func TestParseLastEventID(t *testing.T) {
	for _, tc := range lastEventIDCases {
		got, err := core.ParseLastEventID(tc.header, tc.query)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseLastEventID(%q, %q) = %d, %v", tc.header, tc.query, got, err)
		}
		if err != nil {
			if e := core.Classify(err); e.Status != 400 || e.Code != "invalid_value" {
				t.Errorf("parseLastEventID(%q, %q) error %+v", tc.header, tc.query, e)
			}
		}
	}
}

// FuzzResumeHeaders: the parsers of Streamgate-Resumable and
// Last-Event-ID take any text without panicking, and refuse what they
// refuse with a 400 in OpenAI's shape.
func FuzzResumeHeaders(f *testing.F) {
	for _, tc := range lastEventIDCases {
		f.Add(tc.header, tc.query)
	}
	for _, v := range []string{"true", "TRUE", "false", "", "yes", "1"} {
		f.Add(v, "")
	}
	f.Fuzz(func(t *testing.T, header, query string) {
		n, err := core.ParseLastEventID(header, query)
		if err != nil {
			if e := core.Classify(err); e.Status != 400 || !json.Valid(core.OpenAIErrors(e)) {
				t.Fatalf("Last-Event-ID %q: %+v", header, e)
			}
		} else if v := strings.TrimSpace(header); v != "" && strconv.FormatUint(n, 10) != strings.TrimLeft(v, "+0") && n != 0 {
			t.Fatalf("Last-Event-ID %q parsed as %d", header, n)
		}
		ok, err := core.ParseResumable(header)
		if err != nil {
			if e := core.Classify(err); e.Status != 400 || !json.Valid(core.OpenAIErrors(e)) {
				t.Fatalf("Streamgate-Resumable %q: %+v", header, e)
			}
		} else if ok != strings.EqualFold(strings.TrimSpace(header), "true") {
			t.Fatalf("Streamgate-Resumable %q = %v", header, ok)
		}
		_ = resume.ValidID(query)
	})
}
