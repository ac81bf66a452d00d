package resume_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamgate/streamgate/gateway/resume"
	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// twoReplicas runs f with two Managers on one store, as two gateway
// replicas see it: in memory (one process), and on a real redis-server
// with a client each.
func twoReplicas(t *testing.T, opts *resume.Options, f func(t *testing.T, a, b *resume.Manager)) {
	t.Run("memory", func(t *testing.T) {
		st := store.NewMemory()
		f(t, resume.New(st, opts), resume.New(st, opts))
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		var ms [2]*resume.Manager
		for i := range ms {
			st, err := store.Open(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			ms[i] = resume.New(st, opts)
		}
		f(t, ms[0], ms[1])
	})
}

// causes records the causes a producer was cancelled with.
type causes chan error

func (c causes) cancel(err error) {
	select {
	case c <- err:
	default:
	}
}

func (c causes) wait(t *testing.T, want error) {
	t.Helper()
	select {
	case err := <-c:
		if !errors.Is(err, want) {
			t.Fatalf("cancelled with %v, want %v", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not cancelled (want %v)", want)
	}
}

func TestProduceAndFollow(t *testing.T) {
	twoReplicas(t, nil, func(t *testing.T, a, b *resume.Manager) {
		p := a.Start(store.StreamMeta{Owner: "k1", Format: "openai"}, causes(make(chan error, 1)).cancel)
		<-p.Created()
		for _, d := range []string{"a", "b", "c"} {
			p.Append([]byte(d))
		}
		p.Flush()
		if _, err := b.Open(t.Context(), p.ID(), "k2", 0); !errors.Is(err, resume.ErrNotFound) {
			t.Fatalf("Open with another owner: %v", err)
		}
		r, err := b.Open(t.Context(), p.ID(), "k1", 1)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for len(got) < 2 {
			events, err := r.Next(t.Context(), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range events {
				got = append(got, string(e.Data))
			}
		}
		if got[0] != "b" || got[1] != "c" {
			t.Fatalf("after 1: %q", got)
		}
		p.Append([]byte("[DONE]"))
		p.Close(resume.EndFinal, nil)
		events, err := r.Next(t.Context(), time.Second)
		if err != nil || len(events) != 2 || string(events[0].Data) != "[DONE]" || events[1].End != resume.EndFinal {
			t.Fatalf("the end: %+v, %v", events, err)
		}
		if events, err := r.Next(t.Context(), 0); err != nil || events != nil {
			t.Fatalf("after the end: %+v, %v", events, err)
		}
	})
}

// A cancel on one replica reaches the producer on the other.
func TestCancelFromAnotherReplica(t *testing.T) {
	twoReplicas(t, nil, func(t *testing.T, a, b *resume.Manager) {
		c := causes(make(chan error, 1))
		p := a.Start(store.StreamMeta{Owner: "k1"}, c.cancel)
		<-p.Created()
		if err := b.Cancel(t.Context(), p.ID(), "k2"); !errors.Is(err, resume.ErrNotFound) {
			t.Fatalf("Cancel with another owner: %v", err)
		}
		if err := b.Cancel(t.Context(), p.ID(), "k1"); err != nil {
			t.Fatal(err)
		}
		c.wait(t, resume.ErrCancelled)
		p.Close(resume.EndCancelled, nil)
	})
}

// A detached producer is cancelled after the grace period, unless a
// reader follows it.
func TestGrace(t *testing.T) {
	twoReplicas(t, &resume.Options{Grace: 300 * time.Millisecond}, func(t *testing.T, a, b *resume.Manager) {
		c := causes(make(chan error, 1))
		p := a.Start(store.StreamMeta{}, c.cancel)
		<-p.Created()
		r, err := b.Open(t.Context(), p.ID(), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Detach()
		// Followed for three grace periods: not cancelled.
		for end := time.Now().Add(900 * time.Millisecond); time.Now().Before(end); {
			if _, err := r.Next(t.Context(), 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-c:
				t.Fatalf("cancelled while followed: %v", err)
			default:
			}
		}
		c.wait(t, resume.ErrAbandoned) // nobody reads any more
		p.Close(resume.EndCancelled, nil)
	})
}

// A reader that resumes after the last event of a stream that has ended
// (a Last-Event-ID past the end) gets the end at once: it neither waits
// for events that will never come nor hears that the stream was lost.
func TestOpenPastTheEnd(t *testing.T) {
	twoReplicas(t, nil, func(t *testing.T, a, b *resume.Manager) {
		p := a.Start(store.StreamMeta{Owner: "k1"}, causes(make(chan error, 1)).cancel)
		p.Append([]byte("a"))
		p.Close(resume.EndFinal, nil) // the end is event 2
		for _, after := range []uint64{2, 3, 100} {
			r, err := b.Open(t.Context(), p.ID(), "k1", after)
			if err != nil {
				t.Fatal(err)
			}
			// Not "no events yet": the stream has ended.
			events, err := r.Next(t.Context(), 10*time.Millisecond)
			if err != nil || len(events) != 1 || events[0].End != resume.EndFinal {
				t.Fatalf("after %d: %+v, %v", after, events, err)
			}
			if events, err := r.Next(t.Context(), 0); err != nil || events != nil {
				t.Fatalf("after %d, after the end: %+v, %v", after, events, err)
			}
		}
	})
}
