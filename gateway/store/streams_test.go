package store_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

func ev(id uint64, data string) store.Event { return store.Event{ID: id, Data: []byte(data)} }

func appendOK(t *testing.T, s store.Store, sid string, a store.Append) store.AppendResult {
	t.Helper()
	if a.Lease == 0 {
		a.Lease = 5 * time.Second
	}
	if a.TTL == 0 {
		a.TTL = time.Minute
	}
	a.Holder, a.Renew = "replica-1", true
	res, err := s.AppendStream(t.Context(), sid, a)
	if err != nil {
		t.Fatalf("AppendStream: %v", err)
	}
	return res
}

func readAll(t *testing.T, s store.Store, sid string, after uint64) store.Read {
	t.Helper()
	r, err := s.ReadStream(t.Context(), sid, after, 0, 0)
	if err != nil {
		t.Fatalf("ReadStream: %v", err)
	}
	return r
}

func ids(events []store.Event) string {
	s := ""
	for _, e := range events {
		s += fmt.Sprintf("%d:%s%s ", e.ID, e.Data, e.End)
	}
	return s
}

func TestStreamLog(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		if _, err := s.StreamMeta(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("StreamMeta of no stream: %v", err)
		}
		meta := store.StreamMeta{Owner: "k1", Format: "openai"}
		appendOK(t, s, "s1", store.Append{Meta: &meta, Events: []store.Event{ev(1, "a"), ev(2, "b")}})
		if got, err := s.StreamMeta(ctx, "s1"); err != nil || got != meta {
			t.Fatalf("StreamMeta = %+v, %v", got, err)
		}
		// A batch written again (a retry) adds nothing twice.
		appendOK(t, s, "s1", store.Append{Events: []store.Event{ev(2, "b"), ev(3, "c")}})
		r := readAll(t, s, "s1", 0)
		if got := ids(r.Events); got != "1:a 2:b 3:c " || !r.Live {
			t.Fatalf("read after 0: %q live %v", got, r.Live)
		}
		if got := ids(readAll(t, s, "s1", 2).Events); got != "3:c " {
			t.Fatalf("read after 2: %q", got)
		}
		r, err := s.ReadStream(ctx, "s1", 1, 1, 0)
		if err != nil || ids(r.Events) != "2:b " {
			t.Fatalf("read 1 after 1: %q %v", ids(r.Events), err)
		}
		appendOK(t, s, "s1", store.Append{Events: []store.Event{ev(4, "[DONE]"), {ID: 5, End: "final"}}})
		r = readAll(t, s, "s1", 3)
		if got := ids(r.Events); got != "4:[DONE] 5:final " || !r.Live {
			t.Fatalf("read the end: %q live %v", got, r.Live)
		}
		// At or past the end: the end alone, where the stream ended.
		for _, after := range []uint64{5, 9} {
			if r := readAll(t, s, "s1", after); ids(r.Events) != "5:final " || !r.Live {
				t.Fatalf("read after %d, past the end: %q live %v", after, ids(r.Events), r.Live)
			}
		}
	})
}

// TestStreamFollowWaits: a read with a wait blocks until the next event
// comes. The event is appended only once the reader is seen blocked: in
// a synctest bubble for the memory store, by Redis's count of blocked
// clients for Redis.
func TestStreamFollowWaits(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := store.NewMemory()
			defer s.Close()
			followWaits(t, s, synctest.Wait)
		})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		s, err := store.Open(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		followWaits(t, s, func() {
			deadline := time.Now().Add(time.Minute) // a hang guard: the block is polled, not timed
			for srv.BlockedClients(t) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the reader never blocked in Redis")
				}
				time.Sleep(time.Millisecond)
			}
		})
	})
}

// followWaits runs TestStreamFollowWaits on s; blocked returns once the
// waiting reader is blocked in s.
func followWaits(t *testing.T, s store.Store, blocked func()) {
	appendOK(t, s, "s1", store.Append{Meta: &store.StreamMeta{Format: "openai"}, Events: []store.Event{ev(1, "a")}})
	got := make(chan store.Read, 1)
	go func() {
		r, err := s.ReadStream(context.Background(), "s1", 1, 0, 10*time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	blocked()
	select {
	case r := <-got:
		t.Fatalf("a read with nothing new returned at once: %+v", r)
	default:
	}
	appendOK(t, s, "s1", store.Append{Events: []store.Event{ev(2, "b")}})
	if r := <-got; ids(r.Events) != "2:b " {
		t.Fatalf("waiting read: %q", ids(r.Events))
	}
	// Nothing new within wait: no events, still live.
	r, err := s.ReadStream(t.Context(), "s1", 2, 0, 20*time.Millisecond)
	if err != nil || len(r.Events) != 0 || !r.Live {
		t.Fatalf("quiet read: %+v %v", r, err)
	}
}

func TestStreamLeaseLost(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		appendOK(t, s, "s1", store.Append{Meta: &store.StreamMeta{}, Events: []store.Event{ev(1, "a")}, Lease: 50 * time.Millisecond})
		deadline := time.Now().Add(time.Minute) // a hang guard: expiry is polled, not timed
		for {
			r := readAll(t, s, "s1", 1)
			if !r.Live {
				if len(r.Events) != 0 {
					t.Fatalf("a lost stream's events after the last: %q", ids(r.Events))
				}
				if got := ids(readAll(t, s, "s1", 0).Events); got != "1:a " {
					t.Fatalf("a lost stream's events: %q", got)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the lease never ran out")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func TestStreamCancelAndAttend(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		ctx, stop := context.WithCancel(t.Context())
		ready := make(chan struct{})
		cancelled := make(chan string, 4)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.WatchCancels(ctx, func() { close(ready) }, func(sid string) { cancelled <- sid }); err != nil {
				t.Error(err)
			}
		}()
		defer wg.Wait()
		defer stop()
		<-ready
		if err := s.CancelStream(t.Context(), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("CancelStream of no stream: %v", err)
		}
		res := appendOK(t, s, "s1", store.Append{Meta: &store.StreamMeta{}})
		if res.Cancelled || res.Attended {
			t.Fatalf("new stream: %+v", res)
		}
		if err := s.AttendStream(t.Context(), "s1", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.CancelStream(t.Context(), "s1"); err != nil {
			t.Fatal(err)
		}
		if sid := <-cancelled; sid != "s1" {
			t.Fatalf("cancelled %q", sid)
		}
		if res := appendOK(t, s, "s1", store.Append{}); !res.Cancelled || !res.Attended {
			t.Fatalf("after attend and cancel: %+v", res)
		}
	})
}

func TestStreamExpires(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		appendOK(t, s, "s1", store.Append{Meta: &store.StreamMeta{}, Events: []store.Event{{ID: 1, End: "final"}}, TTL: 50 * time.Millisecond})
		deadline := time.Now().Add(time.Minute) // a hang guard: expiry is polled, not timed
		for {
			_, err := s.StreamMeta(t.Context(), "s1")
			if errors.Is(err, store.ErrNotFound) {
				return
			}
			if err != nil || time.Now().After(deadline) {
				t.Fatalf("stream did not expire: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// A batch without Renew writes events only: the lease is not renewed,
// and nothing is reported.
func TestStreamEventsOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		appendOK(t, s, "s1", store.Append{Meta: &store.StreamMeta{}, Lease: 100 * time.Millisecond})
		if err := s.CancelStream(t.Context(), "s1"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute) // a hang guard: expiry is polled, not timed
		for id := uint64(1); ; id++ {
			res, err := s.AppendStream(t.Context(), "s1", store.Append{Events: []store.Event{ev(id, "x")}, Holder: "replica-1", Lease: time.Minute, TTL: time.Minute})
			if err != nil || res != (store.AppendResult{}) {
				t.Fatalf("events-only append: %+v, %v", res, err)
			}
			if r := readAll(t, s, "s1", id); !r.Live {
				break // the lease ran out although events kept coming
			}
			if time.Now().After(deadline) {
				t.Fatal("events-only appends renewed the lease")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// In Redis a batch of events is one log entry (up to 64 events): a
// read from inside an entry starts after the id asked for, the end
// comes in the last entry, and a trimmed log is an error, never a gap.
func TestStreamLogEntries(t *testing.T) {
	srv := redistest.Start(t)
	s, err := store.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var batch []store.Event
	for i := range 150 {
		batch = append(batch, ev(uint64(i+1), strconv.Itoa(i+1)))
	}
	batch = append(batch, store.Event{ID: 151, End: "final"})
	appendOK(t, s, "s1", store.Append{Meta: &store.StreamMeta{Format: "openai"}, Events: batch})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	if n, err := rc.XLen(t.Context(), "sg:{s1}:log").Result(); err != nil || n != 3 {
		t.Fatalf("151 events in %d log entries (%v), want 3", n, err)
	}
	for _, after := range []uint64{0, 1, 63, 64, 65, 100, 149} {
		r := readAll(t, s, "s1", after)
		if len(r.Events) != 151-int(after) || r.Events[0].ID != after+1 || string(r.Events[0].Data) != strconv.Itoa(int(after)+1) {
			t.Fatalf("read after %d: %d events from %q", after, len(r.Events), ids(r.Events[:1]))
		}
		if last := r.Events[len(r.Events)-1]; last.ID != 151 || last.End != "final" {
			t.Fatalf("read after %d ends with %q", after, ids([]store.Event{last}))
		}
	}
	if err := rc.XTrimMaxLen(t.Context(), "sg:{s1}:log", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadStream(t.Context(), "s1", 100, 0, 0); !errors.Is(err, store.ErrTrimmed) {
		t.Fatalf("read after 100 of a log holding 129 on: %v, want ErrTrimmed", err)
	}
	if r := readAll(t, s, "s1", 140); len(r.Events) != 11 || r.Events[0].ID != 141 {
		t.Fatalf("read after 140 of a log holding 129 on: %q", ids(r.Events))
	}
}
