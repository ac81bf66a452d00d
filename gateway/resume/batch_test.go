package resume_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/resume"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
	"github.com/streamgate/streamgate/upstream/budget"
)

// counting counts a store's AppendStream calls: the producer's round
// trips.
type counting struct {
	store.Streams
	appends atomic.Int64
}

func (c *counting) AppendStream(ctx context.Context, sid string, a store.Append) (store.AppendResult, error) {
	c.appends.Add(1)
	return c.Streams.AppendStream(ctx, sid, a)
}

// oneStore runs f on a store shared by two replicas: in memory, and on a
// real redis-server (one client).
func oneStore(t *testing.T, f func(t *testing.T, st store.Streams)) {
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

// long is an Options whose producer neither renews its lease nor checks
// its grace period during a test: its only writes are the batches.
func long(o resume.Options) *resume.Options {
	o.Lease, o.Grace = time.Hour, time.Hour
	return &o
}

// readAll reads r until it has n events (the end event counts).
func readAll(t *testing.T, r *resume.Reader, n int) []store.Event {
	t.Helper()
	var got []store.Event
	for len(got) < n {
		events, err := r.Next(t.Context(), 10*time.Second)
		if err != nil {
			t.Fatalf("after %d events: %v", len(got), err)
		}
		got = append(got, events...)
	}
	return got
}

// Events flushed within one FlushInterval go to the store in one write:
// a hundred flushes cost the creating write and the closing one, and a
// reader sees none of them before.
func TestFlushInterval(t *testing.T) {
	oneStore(t, func(t *testing.T, st store.Streams) {
		c := &counting{Streams: st}
		a, b := resume.New(c, long(resume.Options{FlushInterval: time.Hour})), resume.New(st, nil)
		p := a.Start(store.StreamMeta{Owner: "k"}, causes(make(chan error, 1)).cancel)
		<-p.Created()
		r, err := b.Open(t.Context(), p.ID(), "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			p.Append([]byte("token"))
			p.Flush()
			if events, err := r.Next(t.Context(), 0); err != nil || len(events) > 0 {
				t.Fatalf("after flush %d, within the interval, a reader read %+v, %v", i+1, events, err)
			}
		}
		p.Close(resume.EndFinal, nil)
		if n := c.appends.Load(); n != 2 {
			t.Errorf("%d writes for 100 flushes within one interval, want 2 (create, close)", n)
		}
		got := readAll(t, r, 101)
		if got[99].ID != 100 || string(got[99].Data) != "token" || got[100].End != resume.EndFinal {
			t.Fatalf("read back %d events, ending %+v", len(got), got[len(got)-2:])
		}
	})
}

// A batch that reaches BatchBytes is written at once, without waiting for
// the interval.
func TestBatchBytes(t *testing.T) {
	oneStore(t, func(t *testing.T, st store.Streams) {
		a, b := resume.New(st, long(resume.Options{FlushInterval: time.Hour, BatchBytes: 8})), resume.New(st, nil)
		p := a.Start(store.StreamMeta{Owner: "k"}, causes(make(chan error, 1)).cancel)
		<-p.Created()
		r, err := b.Open(t.Context(), p.ID(), "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"abcd", "efgh"} {
			p.Append([]byte(d))
			p.Flush()
		}
		if got := readAll(t, r, 2); string(got[0].Data) != "abcd" || string(got[1].Data) != "efgh" {
			t.Fatalf("read %+v", got)
		}
		p.Close(resume.EndFinal, nil)
	})
}

// Once the live client has left, what is pending and every later batch
// are written at once: a client resuming finds what it missed.
func TestDetachWritesAtOnce(t *testing.T) {
	oneStore(t, func(t *testing.T, st store.Streams) {
		a, b := resume.New(st, long(resume.Options{FlushInterval: time.Hour})), resume.New(st, nil)
		p := a.Start(store.StreamMeta{Owner: "k"}, causes(make(chan error, 1)).cancel)
		<-p.Created()
		r, err := b.Open(t.Context(), p.ID(), "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Append([]byte("sent to the live client"))
		p.Flush()
		p.Detach()
		if got := readAll(t, r, 1); string(got[0].Data) != "sent to the live client" {
			t.Fatalf("read %+v", got)
		}
		p.Append([]byte("after it left"))
		p.Flush()
		if got := readAll(t, r, 1); string(got[0].Data) != "after it left" {
			t.Fatalf("read %+v", got)
		}
		p.Close(resume.EndFinal, nil)
	})
}

// logs collects what a Manager logs.
type logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Pending bytes come out of the shared Memory budget until written; a
// stream that cannot get more gives its log up (logged, its readers end
// with ErrLost) while its producer goes on, and every byte goes back.
func TestMemoryBudget(t *testing.T) {
	oneStore(t, func(t *testing.T, st store.Streams) {
		mem, l := budget.New(16), &logs{}
		opts := &resume.Options{FlushInterval: time.Hour, Grace: time.Hour, Lease: 300 * time.Millisecond,
			Memory: mem, Logger: slog.New(slog.NewTextHandler(l, nil))}
		a, b := resume.New(st, opts), resume.New(st, nil)

		ok := a.Start(store.StreamMeta{Owner: "k"}, causes(make(chan error, 1)).cancel)
		<-ok.Created()
		ok.Append([]byte("0123456789"))
		ok.Flush()
		if mem.Used() != 10 {
			t.Fatalf("%d bytes of the budget used by a pending event, want 10", mem.Used())
		}
		ok.Close(resume.EndFinal, nil)
		if mem.Used() != 0 {
			t.Fatalf("%d bytes of the budget still used once the events were written", mem.Used())
		}

		p := a.Start(store.StreamMeta{Owner: "k"}, causes(make(chan error, 1)).cancel)
		<-p.Created()
		r, err := b.Open(t.Context(), p.ID(), "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Append([]byte("0123456789"))
		p.Flush()
		p.Append([]byte("0123456789")) // 20 > 16: given up
		p.Flush()
		if mem.Used() != 0 {
			t.Fatalf("%d bytes of the budget still used by a stream given up", mem.Used())
		}
		if !strings.Contains(l.String(), "queue-memory is spent") {
			t.Fatalf("no reason logged: %s", l.String())
		}
		p.Append([]byte("the producer goes on"))
		p.Flush()
		for {
			events, err := r.Next(t.Context(), 50*time.Millisecond)
			if errors.Is(err, resume.ErrLost) {
				break
			}
			if err != nil || len(events) > 0 {
				t.Fatalf("a reader of a stream given up: %+v, %v", events, err)
			}
		}
		p.Close(resume.EndFinal, nil)
		if mem.Used() != 0 {
			t.Fatalf("%d bytes of the budget used after Close", mem.Used())
		}
	})
}

// A hung Redis (SIGSTOPped): producers never block their caller, their
// pending bytes stay within the budget and go back, Close returns, and
// once Redis continues new streams are written and read again.
func TestHungRedis(t *testing.T) {
	srv := redistest.Start(t)
	st, err := store.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mem := budget.New(4 << 10)
	a := resume.New(st, &resume.Options{FlushInterval: time.Millisecond, OpTimeout: 200 * time.Millisecond,
		Lease: time.Second, Memory: mem})
	p := a.Start(store.StreamMeta{Owner: "k"}, causes(make(chan error, 1)).cancel)
	<-p.Created()
	srv.Pause()
	chunk := bytes.Repeat([]byte("x"), 100)
	for range 1000 { // 100 KB: far past the budget
		p.Append(chunk)
		p.Flush()
		if mem.Used() > mem.Limit() {
			t.Fatalf("%d bytes pending, over the budget of %d", mem.Used(), mem.Limit())
		}
	}
	p.Close(resume.EndFinal, nil) // tries for a Lease, each bounded by OpTimeout
	if mem.Used() != 0 {
		t.Fatalf("%d bytes of the budget used after Close", mem.Used())
	}
	srv.Continue()

	q := a.Start(store.StreamMeta{Owner: "k"}, causes(make(chan error, 1)).cancel)
	q.Append([]byte("after"))
	q.Close(resume.EndFinal, nil)
	r, err := a.Open(t.Context(), q.ID(), "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r, 2); string(got[0].Data) != "after" || got[1].End != resume.EndFinal {
		t.Fatalf("after SIGCONT: %+v", got)
	}
}

// A stream that ends while Redis hangs (as in a failover): Close tries
// the end again until Redis answers, within a Lease, and a reader gets
// every event and the end, not stream_lost.
func TestCloseRetriesTheEnd(t *testing.T) {
	srv := redistest.Start(t)
	st, err := store.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	failed := make(chan string, 100)
	a := resume.New(st, &resume.Options{OpTimeout: 100 * time.Millisecond, Lease: time.Minute,
		StoreError: func(op string) { failed <- op }})
	p := a.Start(store.StreamMeta{Owner: "k"}, causes(make(chan error, 1)).cancel)
	<-p.Created()
	srv.Pause()
	p.Append([]byte("last"))
	closed := make(chan struct{})
	go func() {
		p.Close(resume.EndFinal, nil)
		close(closed)
	}()
	<-failed // the end's first try
	srv.Continue()
	<-closed
	r, err := a.Open(t.Context(), p.ID(), "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, r, 2); string(got[0].Data) != "last" || got[1].End != resume.EndFinal {
		t.Fatalf("after Close across a hang: %+v", got)
	}
}

// BenchmarkLogCost runs streams of tokens at a fixed cadence on a real
// redis-server and reports what the log costs Redis per token: the
// producer's round trips (store writes) and Redis's commands. Each op is
// one stream of 50 tokens 20ms apart, 64 at a time:
//
//	go test -run '^$' -bench LogCost -benchtime 256x ./gateway/resume/
func BenchmarkLogCost(b *testing.B) {
	for _, flush := range []time.Duration{-1, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond} {
		b.Run("flush="+flush.String(), func(b *testing.B) {
			srv := redistest.Start(b)
			st, err := store.Open(srv.URL())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			c := &counting{Streams: st}
			m := resume.New(c, &resume.Options{FlushInterval: flush})
			const tokens, cadence = 50, 20 * time.Millisecond
			sem := make(chan struct{}, 64)
			var wg sync.WaitGroup
			b.ResetTimer()
			for range b.N {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					p := m.Start(store.StreamMeta{}, func(error) {})
					<-p.Created()
					tick := time.NewTicker(cadence)
					defer tick.Stop()
					for range tokens {
						<-tick.C
						p.Append([]byte(`{"text_output":"token"}`))
						p.Flush()
					}
					p.Close(resume.EndFinal, nil)
				})
			}
			wg.Wait()
			b.StopTimer()
			n := float64(b.N * tokens)
			b.ReportMetric(float64(c.appends.Load())/n, "roundtrips/token")
			b.ReportMetric(float64(srv.CommandsProcessed(b))/n, "cmds/token")
		})
	}
}
