package logbuf

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// out is the output under test: it records each write it gets and
// signals them.
type out struct {
	mu     sync.Mutex
	writes []string
	wrote  chan struct{}
}

func newOut() *out { return &out{wrote: make(chan struct{}, 100)} }

func (o *out) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.writes = append(o.writes, string(p))
	o.mu.Unlock()
	select {
	case o.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (o *out) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.writes, "")
}

func (o *out) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.writes)
}

// Lines wait in the buffer until Flush, which writes them in one write,
// in order; after Close every line goes out at once.
func TestBuffersUntilFlushAndClose(t *testing.T) {
	o := newOut()
	b := New(o, time.Hour)
	for i := range 3 {
		fmt.Fprintf(b, "line %d\n", i)
	}
	if o.count() != 0 {
		t.Fatalf("written before a flush: %q", o.String())
	}
	b.Flush()
	if o.count() != 1 || o.String() != "line 0\nline 1\nline 2\n" {
		t.Fatalf("after a flush: %q", o.writes)
	}
	b.Write([]byte("line 3\n"))
	b.Close()
	b.Write([]byte("line 4\n"))
	if got := o.String(); got != "line 0\nline 1\nline 2\nline 3\nline 4\n" || o.count() != 3 {
		t.Fatalf("after Close: %q", o.writes)
	}
}

// The interval's end writes the lines out by itself.
func TestIntervalFlushes(t *testing.T) {
	o := newOut()
	b := New(o, time.Millisecond)
	defer b.Close()
	b.Write([]byte("one\n"))
	b.Write([]byte("two\n"))
	<-o.wrote
	if got := o.String(); got != "one\ntwo\n" && got != "one\n" {
		t.Fatalf("first write: %q", got)
	}
	for !strings.HasSuffix(o.String(), "two\n") {
		<-o.wrote
	}
}

// blocked is an output that holds every write until released, and
// says when one has started.
type blocked struct {
	*out
	entered chan struct{}
	release chan struct{}
}

func (o *blocked) Write(p []byte) (int, error) {
	select {
	case o.entered <- struct{}{}:
	default:
	}
	<-o.release
	return o.out.Write(p)
}

// A full buffer goes out at once, on the timer's goroutine: a Write
// never waits for a slow output (the goroutine logging may be an
// upstream stream's reader) until Backlog bytes wait. Every line still
// goes out, in order, in writes of whole lines within PipeBuf; a line as
// large as the buffer goes straight through, after what was buffered.
func TestFullBufferWritesBehind(t *testing.T) {
	o := &blocked{out: newOut(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	b := New(o, time.Hour)
	line := strings.Repeat("x", 999) + "\n"
	var want strings.Builder
	for range Size/len(line) + 1 { // one line past full
		b.Write([]byte(line))
		want.WriteString(line)
	}
	<-o.entered // the full buffer is being written, and the output holds it
	// Had a Write waited for the output, it would never return here.
	for i := range Size / len(line) {
		l := fmt.Sprintf("%d%s", i, line)
		b.Write([]byte(l))
		want.WriteString(l)
	}
	close(o.release)
	b.Write([]byte("small\n"))
	big := strings.Repeat("y", Size-1) + "\n"
	b.Write([]byte(big))
	want.WriteString("small\n" + big)
	b.Close()
	if got := o.String(); got != want.String() {
		t.Fatalf("%d bytes out, want %d, in order", len(got), want.Len())
	}
	last := o.writes[len(o.writes)-1]
	for _, w := range o.writes[:len(o.writes)-1] {
		if len(w) > PipeBuf || !strings.HasSuffix(w, "\n") {
			t.Fatalf("a write of %d bytes, not of whole lines within %d", len(w), PipeBuf)
		}
	}
	if last != big || o.writes[len(o.writes)-2] != "small\n" && !strings.HasSuffix(o.writes[len(o.writes)-2], "\nsmall\n") {
		t.Fatalf("the big line did not go through whole after the buffered one")
	}
}

// To a regular file the buffer goes out in one write.
func TestFileWhole(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := New(f, time.Hour)
	if !b.file {
		t.Fatal("a regular file not known as one")
	}
	line := strings.Repeat("x", 99) + "\n"
	for range 100 {
		b.Write([]byte(line))
	}
	b.Close()
	got, err := os.ReadFile(f.Name())
	if err != nil || string(got) != strings.Repeat(line, 100) {
		t.Fatalf("the file holds %d bytes, %v", len(got), err)
	}
	if New(newOut(), time.Hour).file {
		t.Fatal("a writer taken for a file")
	}
}

// Zero interval: every line is written at once.
func TestUnbuffered(t *testing.T) {
	o := newOut()
	b := New(o, 0)
	b.Write([]byte("a\n"))
	b.Write([]byte("b\n"))
	if o.count() != 2 {
		t.Fatalf("writes %q", o.writes)
	}
}

// Through Handler, a warning or an error goes out at once with the lines
// buffered before it, in order; an info line waits.
func TestWarningsGoOutAtOnce(t *testing.T) {
	o := newOut()
	b := New(o, time.Hour)
	defer b.Close()
	log := slog.New(Handler(slog.NewTextHandler(b, nil), b)).With("k", "v")
	log.Info("request", "n", 1)
	if o.count() != 0 {
		t.Fatalf("an info line went out: %q", o.String())
	}
	log.WithGroup("g").Warn("trouble", "n", 2)
	got := o.String()
	i, w := strings.Index(got, "msg=request k=v n=1"), strings.Index(got, "msg=trouble k=v g.n=2")
	if i < 0 || w < i || o.count() != 1 {
		t.Fatalf("after a warning: %q", o.writes)
	}
	log.Error("worse")
	if !strings.Contains(o.String(), "level=ERROR msg=worse") {
		t.Fatalf("the error did not go out: %q", o.String())
	}
}

// Lines written from many goroutines arrive whole, each once, and Close
// leaves none behind.
func TestConcurrentLines(t *testing.T) {
	o := newOut()
	b := New(o, time.Microsecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				fmt.Fprintf(b, "g%d line %d z%s\n", g, i, strings.Repeat("z", i%200))
			}
		})
	}
	wg.Wait()
	b.Close()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(o.String(), "\n"), "\n") {
		var g, i int
		var z string
		if _, err := fmt.Sscanf(line, "g%d line %d %s", &g, &i, &z); err != nil {
			t.Fatalf("a broken line %q: %v", line, err)
		}
		if len(z) != 1+i%200 || seen[line] {
			t.Fatalf("a broken or repeated line %q", line)
		}
		seen[line] = true
	}
	if len(seen) != 8*500 {
		t.Fatalf("%d lines, want %d", len(seen), 8*500)
	}
}
