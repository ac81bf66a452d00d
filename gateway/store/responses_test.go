package store_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
)

// A stored response is read back as written, replaced by a later write,
// gone once deleted or expired.
func TestResponses(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		ctx := t.Context()
		if _, err := s.GetResponse(ctx, "resp-1"); !errors.Is(err, store.ErrNoResponse) {
			t.Fatalf("get before put: %v", err)
		}
		r := store.StoredResponse{Owner: "k1", Object: []byte(`{"id":"resp-1","status":"in_progress"}`), Data: []byte(`{"input":[]}`)}
		if err := s.PutResponse(ctx, "resp-1", r, time.Minute); err != nil {
			t.Fatal(err)
		}
		r.Object = []byte(`{"id":"resp-1","status":"completed"}`)
		if err := s.UpdateResponse(ctx, "resp-1", r, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetResponse(ctx, "resp-1")
		if err != nil || got.Owner != "k1" || string(got.Object) != `{"id":"resp-1","status":"completed"}` || string(got.Data) != `{"input":[]}` {
			t.Fatalf("get: %+v %v", got, err)
		}
		if err := s.DeleteResponse(ctx, "resp-1"); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateResponse(ctx, "resp-1", r, time.Minute); !errors.Is(err, store.ErrNoResponse) {
			t.Fatalf("update after delete: %v", err)
		}
		if err := s.DeleteResponse(ctx, "resp-1"); !errors.Is(err, store.ErrNoResponse) {
			t.Fatalf("second delete: %v", err)
		}
		if _, err := s.GetResponse(ctx, "resp-1"); !errors.Is(err, store.ErrNoResponse) {
			t.Fatalf("get after delete: %v", err)
		}
		if err := s.PutResponse(ctx, "resp-2", r, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute) // a hang guard: expiry is polled, not timed
		for {
			_, err := s.GetResponse(ctx, "resp-2")
			if errors.Is(err, store.ErrNoResponse) {
				break
			}
			if err != nil || time.Now().After(deadline) {
				t.Fatalf("resp-2 never expired: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// BenchmarkMemoryPutResponse is one stored response written while 100,000
// others are kept (a day's worth on a busy single replica): expired
// records are swept at most once a second, not on every write.
func BenchmarkMemoryPutResponse(b *testing.B) {
	s := store.NewMemory()
	ctx := b.Context()
	r := store.StoredResponse{Owner: "k1", Object: []byte(`{"status":"completed"}`)}
	for i := range 100_000 {
		if err := s.PutResponse(ctx, "old-"+strconv.Itoa(i), r, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := s.PutResponse(ctx, "new-"+strconv.Itoa(i), r, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}
