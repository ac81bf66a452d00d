package modelcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamgate/streamgate/engine/llama2/llama2test"
)

// hub is a local stand-in for the Hugging Face Hub and its CDN, two
// servers: HEAD and GET on the hub's /resolve/main/NAME answer with a
// redirect to the CDN's /cdn/NAME carrying X-Linked-Etag (the SHA-256 of
// the file) and X-Linked-Size; /resolve/main/renamed/NAME redirects to
// /resolve/main/NAME on the hub (a relative redirect, as for a renamed
// repository); the CDN serves the bytes with Range support
// (http.ServeContent).
type hub struct {
	t        *testing.T
	srv, cdn *httptest.Server

	mu       sync.Mutex
	files    map[string][]byte // served content
	etags    map[string]string // published X-Linked-Etag; default the content's sha256
	cutAt    map[string]int    // the next GET of NAME stops after this many bytes
	noRange  bool              // ignore Range headers (answer 200 with everything)
	hold     bool              // after a cut, wait for the client to leave instead of dropping it
	requests []string          // "METHOD PATH RANGE"
}

func newHub(t *testing.T) *hub {
	h := &hub{t: t, files: map[string][]byte{}, etags: map[string]string{}, cutAt: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.cdn.Close)
	return h
}

func (h *hub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+r.Header.Get("Range")))
	h.mu.Unlock()
	if name, ok := strings.CutPrefix(r.URL.Path, "/resolve/main/renamed/"); ok {
		http.Redirect(w, r, "/resolve/main/"+name, http.StatusTemporaryRedirect)
		return
	}
	if name, ok := strings.CutPrefix(r.URL.Path, "/resolve/main/"); ok {
		h.mu.Lock()
		data, ok := h.files[name]
		etag := h.etags[name]
		h.mu.Unlock()
		if !ok {
			http.Error(w, "Entry not found", http.StatusNotFound)
			return
		}
		if etag == "" {
			etag = sum(data)
		}
		w.Header().Set("X-Linked-Etag", `"`+etag+`"`)
		w.Header().Set("X-Linked-Size", fmt.Sprint(len(data)))
		w.Header().Set("ETag", `W/"0123456789abcdef0123456789abcdef01234567"`) // a git blob id, to be ignored
		http.Redirect(w, r, h.cdn.URL+"/cdn/"+name, http.StatusFound)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/cdn/")
	h.mu.Lock()
	data, found := h.files[name]
	cut, cutting := h.cutAt[name]
	delete(h.cutAt, name)
	noRange, hold := h.noRange, h.hold
	h.mu.Unlock()
	if !ok || !found {
		http.NotFound(w, r)
		return
	}
	if noRange {
		r.Header.Del("Range")
	}
	if !cutting {
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
		return
	}
	// Promise the whole file, send part of it, then drop the connection.
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	w.WriteHeader(http.StatusOK)
	w.Write(data[:cut])
	http.NewResponseController(w).Flush()
	if hold {
		<-r.Context().Done()
	}
	panic(http.ErrAbortHandler)
}

func (h *hub) put(name string, data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.files[name] = data
}

func (h *hub) log() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.requests...)
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// testModel generates a checkpoint and tokenizer, serves them from a new
// hub and returns a Model pointing at them: the checkpoint verified against
// the hub's published hash, the tokenizer against a pinned one.
func testModel(t *testing.T) (*hub, Model, []byte, []byte) {
	t.Helper()
	dir := t.TempDir()
	ckpt, tok := filepath.Join(dir, "c.bin"), filepath.Join(dir, "t.bin")
	if err := llama2test.WriteModel(ckpt, tok, 1); err != nil {
		t.Fatal(err)
	}
	cb, _ := os.ReadFile(ckpt)
	tb, _ := os.ReadFile(tok)
	h := newHub(t)
	h.put("stories15M.bin", cb)
	h.put("tokenizer.bin", tb)
	m := Model{Name: "stories15M", ID: "stories15m",
		Checkpoint: File{Name: "stories15M.bin", URL: h.srv.URL + "/resolve/main/stories15M.bin"},
		Tokenizer:  File{Name: "tokenizer.bin", URL: h.srv.URL + "/resolve/main/tokenizer.bin", SHA256: sum(tb)},
	}
	return h, m, cb, tb
}

func pull(t *testing.T, c Cache, m Model, o Options) (string, error) {
	t.Helper()
	var out bytes.Buffer
	o.Progress = &out
	o.Client = &http.Client{Transport: &http.Transport{}}
	defer o.Client.CloseIdleConnections()
	err := c.Pull(context.Background(), m, &o)
	return out.String(), err
}

func checkCached(t *testing.T, c Cache, f File, want []byte) {
	t.Helper()
	got, err := os.ReadFile(c.Path(f))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s in the cache: %d bytes, %v; want %d bytes", f.Name, len(got), err, len(want))
	}
	if _, err := os.Stat(c.partPath(f)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.part left behind: %v", f.Name, err)
	}
	rec, _ := os.ReadFile(c.sumPath(f))
	if string(rec) != sum(want)+"  "+f.Name+"\n" {
		t.Errorf("%s: recorded %q", c.sumPath(f), rec)
	}
}

func TestPullVerifiesAndShowsProgress(t *testing.T) {
	h, m, cb, tb := testModel(t)
	c := Cache{Dir: filepath.Join(t.TempDir(), "cache")}
	out, err := pull(t, c, m, Options{})
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, out)
	}
	checkCached(t, c, m.Checkpoint, cb)
	checkCached(t, c, m.Tokenizer, tb)
	if !c.Has(m) {
		t.Error("Has = false after Pull")
	}
	// Not a terminal: one line per tenth of each file (showing the count
	// when the body's chunk crossed it: only the percentages are fixed),
	// then the verdict.
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if want := fmt.Sprintf("stories15M.bin: downloading %s from %s", formatBytes(int64(len(cb))), m.Checkpoint.URL); lines[0] != want {
		t.Errorf("first line %q, want %q", lines[0], want)
	}
	var pcts []int
	for _, l := range lines {
		var p int
		if _, err := fmt.Sscanf(l, "stories15M.bin: %d%% (", &p); err == nil {
			pcts = append(pcts, p)
		}
	}
	if len(pcts) == 0 || len(pcts) > 10 || pcts[len(pcts)-1] != 100 || !slices.IsSorted(pcts) || pcts[0] < 10 {
		t.Errorf("progress percentages %v:\n%s", pcts, out)
	}
	host := strings.TrimPrefix(h.srv.URL, "http://")
	for _, w := range []string{
		"stories15M.bin: 100% (" + formatBytes(int64(len(cb))) + " of " + formatBytes(int64(len(cb))) + ")\n",
		"stories15M.bin: sha256 ok (published by " + host + ")\n",
		"tokenizer.bin: sha256 ok (pinned)\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("progress lacks %q:\n%s", w, out)
		}
	}
	// The checkpoint's hash came from a HEAD that did not follow the
	// redirect; the pinned tokenizer needed none.
	if got := strings.Join(h.log(), "\n"); got != "HEAD /resolve/main/stories15M.bin\nGET /resolve/main/stories15M.bin\nGET /cdn/stories15M.bin\nGET /resolve/main/tokenizer.bin\nGET /cdn/tokenizer.bin" {
		t.Errorf("requests:\n%s", got)
	}

	// A second pull checks what is there and downloads nothing.
	out, err = pull(t, c, m, Options{})
	if err != nil || out != "stories15M.bin: already in the cache, sha256 ok (recorded when pulled)\ntokenizer.bin: already in the cache, sha256 ok (pinned)\n" {
		t.Errorf("second pull: %v\n%s", err, out)
	}
	if n := len(h.log()); n != 5 {
		t.Errorf("second pull made %d requests", n-5)
	}
}

func TestPullResumesWhenTheConnectionDrops(t *testing.T) {
	h, m, cb, _ := testModel(t)
	cut := len(cb) * 2 / 5
	h.cutAt["stories15M.bin"] = cut
	c := Cache{Dir: t.TempDir()}
	out, err := pull(t, c, m, Options{})
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, out)
	}
	checkCached(t, c, m.Checkpoint, cb)
	for _, w := range []string{
		"stories15M.bin: connection lost (unexpected EOF); resuming, try 2 of 3\n",
		fmt.Sprintf("stories15M.bin: resuming at %s of %s\n", formatBytes(int64(cut)), formatBytes(int64(len(cb)))),
		"stories15M.bin: sha256 ok",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("progress lacks %q:\n%s", w, out)
		}
	}
	want := fmt.Sprintf("GET /cdn/stories15M.bin bytes=%d-", cut)
	if !strings.Contains(strings.Join(h.log(), "\n"), want) {
		t.Errorf("no %q among the requests:\n%s", want, strings.Join(h.log(), "\n"))
	}
}

func TestPullResumesAcrossRuns(t *testing.T) {
	h, m, cb, _ := testModel(t)
	cut := len(cb) / 3
	h.cutAt["stories15M.bin"] = cut
	c := Cache{Dir: t.TempDir()}
	out, err := pull(t, c, m, Options{Attempts: 1})
	if err == nil || !strings.Contains(err.Error(), "run the same command again to resume") {
		t.Fatalf("interrupted pull: %v\n%s", err, out)
	}
	if st, err := os.Stat(c.partPath(m.Checkpoint)); err != nil || st.Size() != int64(cut) {
		t.Fatalf(".part after the cut: %v %v, want %d bytes", st, err, cut)
	}
	if _, err := os.Stat(c.Path(m.Checkpoint)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("incomplete file in the cache: %v", err)
	}
	out, err = pull(t, c, m, Options{Attempts: 1})
	if err != nil {
		t.Fatalf("second pull: %v\n%s", err, out)
	}
	checkCached(t, c, m.Checkpoint, cb)
	if !strings.Contains(out, "resuming at "+formatBytes(int64(cut))) {
		t.Errorf("second pull did not resume:\n%s", out)
	}
}

func TestPullStartsOverWithoutRangeSupport(t *testing.T) {
	h, m, cb, _ := testModel(t)
	h.noRange = true
	c := Cache{Dir: t.TempDir()}
	if err := os.WriteFile(c.partPath(m.Checkpoint), cb[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := pull(t, c, m, Options{})
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, out)
	}
	checkCached(t, c, m.Checkpoint, cb)
	if !strings.Contains(out, "does not resume downloads: starting again") {
		t.Errorf("progress:\n%s", out)
	}
}

func TestPullRejectsACorruptedFile(t *testing.T) {
	h, m, cb, tb := testModel(t)
	bad := bytes.Clone(cb)
	bad[len(bad)/2] ^= 0xff
	h.put("stories15M.bin", bad)
	h.etags["stories15M.bin"] = sum(cb) // the hub publishes the good file's hash
	c := Cache{Dir: t.TempDir()}
	out, err := pull(t, c, m, Options{})
	var de *DigestError
	if !errors.As(err, &de) || de.Got != sum(bad) || de.Want != sum(cb) || !strings.HasPrefix(de.Source, "published by ") {
		t.Fatalf("pull of a corrupted file: %v\n%s", err, out)
	}
	for _, p := range []string{c.Path(m.Checkpoint), c.partPath(m.Checkpoint), c.sumPath(m.Checkpoint)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a rejected download: %v", p, err)
		}
	}
	if c.Has(m) {
		t.Error("Has = true after a rejected download")
	}

	// A pinned hash is checked the same way.
	h.put("stories15M.bin", cb)
	h.put("tokenizer.bin", bytes.ToUpper(tb))
	_, err = pull(t, c, m, Options{})
	if !errors.As(err, &de) || de.File != "tokenizer.bin" || de.Source != "pinned" || de.Want != sum(tb) {
		t.Fatalf("pull of a tokenizer that differs from its pinned hash: %v", err)
	}
	checkCached(t, c, m.Checkpoint, cb)
}

func TestPullReplacesACorruptedCachedFile(t *testing.T) {
	_, m, cb, _ := testModel(t)
	c := Cache{Dir: t.TempDir()}
	if out, err := pull(t, c, m, Options{}); err != nil {
		t.Fatalf("pull: %v\n%s", err, out)
	}
	if err := os.WriteFile(c.Path(m.Checkpoint), cb[:len(cb)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := pull(t, c, m, Options{})
	if err != nil || !strings.Contains(out, "stories15M.bin: the cached copy's sha256 is "+sum(cb[:len(cb)-1])) {
		t.Fatalf("pull over a damaged cache: %v\n%s", err, out)
	}
	checkCached(t, c, m.Checkpoint, cb)
}

func TestPullOffline(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close() // nothing listens there now: connections are refused
	m := Model{Name: "x",
		Checkpoint: File{Name: "x.bin", URL: closed + "/x.bin"},
		Tokenizer:  File{Name: "t.bin", URL: closed + "/t.bin", SHA256: strings.Repeat("0", 64)}}
	c := Cache{Dir: t.TempDir()}
	_, err = pull(t, c, m, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "x.bin: cannot reach "+l.Addr().String()+" (offline?): ") ||
		!strings.HasSuffix(err.Error(), "; without a network, copy x.bin and t.bin (from "+closed+"/x.bin and "+closed+"/t.bin) into "+c.Dir+" by hand") {
		t.Fatalf("offline pull: %v", err)
	}
	// The pinned file needs no HEAD: its GET fails the same way.
	m.Checkpoint.SHA256 = strings.Repeat("0", 64)
	if _, err = pull(t, c, m, Options{}); err == nil || !strings.Contains(err.Error(), "(offline?)") {
		t.Fatalf("offline pull of a pinned file: %v", err)
	}
	if entries, _ := os.ReadDir(c.Dir); len(entries) != 0 {
		t.Errorf("offline pull left %v", entries)
	}
}

func TestPullNeedsAHash(t *testing.T) {
	h, m, _, _ := testModel(t)
	h.etags["stories15M.bin"] = "0123456789abcdef0123456789abcdef01234567" // a git blob id
	_, err := pull(t, Cache{Dir: t.TempDir()}, m, Options{})
	if err == nil || !strings.Contains(err.Error(), "publishes no SHA-256") || !strings.Contains(err.Error(), "refusing an unverified download") {
		t.Fatalf("pull without a published SHA-256: %v", err)
	}
	m.Checkpoint.URL = h.srv.URL + "/resolve/main/missing.bin"
	_, err = pull(t, Cache{Dir: t.TempDir()}, m, Options{})
	if err == nil || !strings.Contains(err.Error(), "404 Not Found") {
		t.Fatalf("pull of a missing file: %v", err)
	}
}

func TestPullInterrupted(t *testing.T) {
	h, m, cb, _ := testModel(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.cutAt["stories15M.bin"] = len(cb) / 2
	h.hold = true
	c := Cache{Dir: t.TempDir()}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	// The user presses Ctrl-C once the first progress line shows.
	progress := writerFunc(func(b []byte) (int, error) {
		if bytes.Contains(b, []byte("% (")) {
			cancel()
		}
		return len(b), nil
	})
	err := c.Pull(ctx, m, &Options{Client: client, Progress: progress})
	if err == nil || !strings.HasPrefix(err.Error(), "stories15M.bin: interrupted; run the same command again to resume") {
		t.Fatalf("interrupted pull: %v", err)
	}
	if st, err := os.Stat(c.partPath(m.Checkpoint)); err != nil || st.Size() == 0 || st.Size() > int64(len(cb)/2) {
		t.Fatalf(".part after the interruption: %v %v", st, err)
	}
	// The next run resumes it.
	h.hold = false
	out, err := pull(t, c, m, Options{})
	if err != nil || !strings.Contains(out, "stories15M.bin: resuming at ") {
		t.Fatalf("pull after the interruption: %v\n%s", err, out)
	}
	checkCached(t, c, m.Checkpoint, cb)
}

func TestProgressOnATerminal(t *testing.T) {
	_, m, cb, _ := testModel(t)
	out, err := pull(t, Cache{Dir: t.TempDir()}, m, Options{Terminal: true})
	if err != nil {
		t.Fatal(err)
	}
	full := "\rstories15M.bin [" + strings.Repeat("=", barWidth) + "] 100% (" + formatBytes(int64(len(cb))) + " of " + formatBytes(int64(len(cb))) + ")"
	if !strings.Contains(out, full) || !strings.Contains(out, "\x1b[K\n") {
		t.Errorf("terminal progress lacks the full bar %q:\n%q", full, out)
	}
	if strings.Contains(out, "stories15M.bin: 10% (") {
		t.Errorf("terminal progress printed plain lines:\n%q", out)
	}
}

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		in          string
		start, size int64
		ok          bool
	}{
		{"bytes 100-199/200", 100, 200, true},
		{"bytes 0-0/*", 0, -1, true},
		{"bytes */200", 0, 0, false},
		{"items 1-2/3", 0, 0, false},
		{"bytes x-2/3", 0, 0, false},
		{"bytes 1-2/y", 0, 0, false},
		{"", 0, 0, false},
	} {
		start, size, ok := parseContentRange(tc.in)
		if start != tc.start || size != tc.size || ok != tc.ok {
			t.Errorf("parseContentRange(%q) = %d, %d, %v; want %d, %d, %v", tc.in, start, size, ok, tc.start, tc.size, tc.ok)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func TestProgressLines(t *testing.T) {
	for _, tc := range []struct {
		have, total int64
		want        string
	}{
		{0, 1000, "f: 10% (100 B of 1.0 kB)\nf: 20% (200 B of 1.0 kB)\nf: 30% (300 B of 1.0 kB)\nf: 40% (400 B of 1.0 kB)\nf: 50% (500 B of 1.0 kB)\n" +
			"f: 60% (600 B of 1.0 kB)\nf: 70% (700 B of 1.0 kB)\nf: 80% (800 B of 1.0 kB)\nf: 90% (900 B of 1.0 kB)\nf: 100% (1.0 kB of 1.0 kB)\n"},
		{650, 1000, "f: 70% (700 B of 1.0 kB)\nf: 80% (800 B of 1.0 kB)\nf: 90% (900 B of 1.0 kB)\nf: 100% (1.0 kB of 1.0 kB)\n"},
		{0, 7, "f: 14% (1 B of 7 B)\nf: 28% (2 B of 7 B)\nf: 42% (3 B of 7 B)\nf: 57% (4 B of 7 B)\nf: 71% (5 B of 7 B)\nf: 85% (6 B of 7 B)\nf: 100% (7 B of 7 B)\n"},
	} {
		var out strings.Builder
		p := newProgress(&out, false, "f", tc.have, tc.total)
		for range tc.total - tc.have {
			p.Write([]byte{0})
		}
		p.finish()
		if out.String() != tc.want {
			t.Errorf("have %d of %d, one byte at a time:\n%s\nwant\n%s", tc.have, tc.total, out.String(), tc.want)
		}
	}
	// An unknown size: a line per 16 MB, and the total at the end.
	var out strings.Builder
	p := newProgress(&out, false, "f", 0, -1)
	p.Write(make([]byte, plainStep+5))
	p.Write(make([]byte, 2_000_000))
	p.finish()
	if want := "f: 16.8 MB\nf: 18.8 MB\n"; out.String() != want {
		t.Errorf("unknown size:\n%q, want %q", out.String(), want)
	}
}

// A relative redirect (a renamed repository) is followed to the resolve
// URL that publishes the hash; the absolute one to the CDN is not.
func TestPullFollowsRelativeRedirects(t *testing.T) {
	h, m, cb, _ := testModel(t)
	m.Checkpoint.URL = h.srv.URL + "/resolve/main/renamed/stories15M.bin"
	c := Cache{Dir: t.TempDir()}
	if out, err := pull(t, c, m, Options{}); err != nil {
		t.Fatalf("pull: %v\n%s", err, out)
	}
	checkCached(t, c, m.Checkpoint, cb)
	if got := strings.Join(h.log()[:2], "\n"); got != "HEAD /resolve/main/renamed/stories15M.bin\nHEAD /resolve/main/stories15M.bin" {
		t.Errorf("requests:\n%s", got)
	}
}

// BenchmarkPull measures a whole pull of a stories15M-sized checkpoint
// (and a 6 kB tokenizer) over loopback: HEAD, download with progress,
// SHA-256 check, rename.
func BenchmarkPull(b *testing.B) {
	files := map[string][]byte{"/stories15M.bin": make([]byte, 60_816_028), "/tokenizer.bin": make([]byte, 6227)}
	for _, d := range files {
		for i := range d {
			d[i] = byte(i * 7)
		}
	}
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "x", time.Time{}, bytes.NewReader(files[r.URL.Path]))
	}))
	defer cdn.Close()
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Linked-Etag", `"`+sum(files[r.URL.Path])+`"`)
		http.Redirect(w, r, cdn.URL+r.URL.Path, http.StatusFound)
	}))
	defer hub.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	m := Model{Name: "x",
		Checkpoint: File{Name: "stories15M.bin", URL: hub.URL + "/stories15M.bin"},
		Tokenizer:  File{Name: "tokenizer.bin", URL: hub.URL + "/tokenizer.bin"}}
	b.SetBytes(int64(len(files["/stories15M.bin"])))
	for b.Loop() {
		c := Cache{Dir: b.TempDir()}
		if err := c.Pull(context.Background(), m, &Options{Client: client}); err != nil {
			b.Fatal(err)
		}
	}
}
