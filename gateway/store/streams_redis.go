package store

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A stream's keys in Redis, all tagged {sid} so that they share a Cluster
// slot:
//
//	sg:{sid}:meta   hash: owner, format, cancel ("1" once cancelled)
//	sg:{sid}:log    stream: one entry per batch of events (at most
//	                maxEntryEvents), id "<n>-0" of its last event n,
//	                fields entryValues: d (data), or n (count) and d0,
//	                d1, …; on the end entry, e (how it ended)
//	sg:{sid}:lease  string: the producing replica; expires unless renewed
//	sg:{sid}:seen   string: present while a reader follows the stream
//
// Cancels are published on the channel sg:cancel (the sid).
const cancelChannel = "sg:cancel"

func streamKey(sid, part string) string { return "sg:{" + sid + "}:" + part }

type redisStreams struct{ c redis.UniversalClient }

func (s *redisStreams) init(c redis.UniversalClient) { s.c = c }

// cancelScript raises the cancel flag of an existing stream.
var cancelScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'cancel', '1')
return 1`)

func (s *redisStreams) AppendStream(ctx context.Context, sid string, a Append) (AppendResult, error) {
	meta, log, lease := streamKey(sid, "meta"), streamKey(sid, "log"), streamKey(sid, "lease")
	pipe := s.c.Pipeline()
	if a.Meta != nil {
		pipe.HSet(ctx, meta, "owner", a.Meta.Owner, "format", a.Meta.Format)
	}
	var adds []*redis.StringCmd
	for events := range slices.Chunk(a.Events, maxEntryEvents) {
		last := events[len(events)-1]
		adds = append(adds, pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: log, MaxLen: MaxStreamEvents, Approx: true,
			ID: strconv.FormatUint(last.ID, 10) + "-0", Values: entryValues(events),
		}))
	}
	end := ended(a.Events)
	if end {
		pipe.Del(ctx, lease)
	} else if a.Renew {
		pipe.Set(ctx, lease, a.Holder, a.Lease)
	}
	var cancel *redis.StringCmd
	var seen *redis.IntCmd
	if end || a.Renew {
		pipe.PExpire(ctx, meta, a.TTL)
		pipe.PExpire(ctx, log, a.TTL)
	}
	if a.Renew {
		cancel = pipe.HGet(ctx, meta, "cancel")
		seen = pipe.Exists(ctx, streamKey(sid, "seen"))
	}
	cmds, _ := pipe.Exec(ctx)
	for _, c := range cmds {
		err := c.Err()
		if err == nil || errors.Is(err, redis.Nil) || isAddedBefore(c, adds) {
			continue
		}
		return AppendResult{}, unavailable(err)
	}
	if !a.Renew {
		return AppendResult{}, nil
	}
	return AppendResult{Cancelled: cancel.Val() == "1", Attended: seen.Val() == 1}, nil
}

// maxEntryEvents is the most events one log entry holds: a batch of
// more is written as several entries (in the same round trip), so that
// Redis trims a long log by parts.
const maxEntryEvents = 64

// entryValues are the fields of the log entry holding events, whose ids
// follow one another: one event is d (its data) and, at the end, e (how
// the stream ended); more are n (how many), d0, d1, … and e for the last.
// The entry's id is the last event's.
func entryValues(events []Event) []any {
	last := events[len(events)-1]
	var vals []any
	if len(events) == 1 {
		vals = []any{"d", last.Data}
	} else {
		vals = make([]any, 0, 2*len(events)+4)
		vals = append(vals, "n", len(events))
		for i, e := range events {
			vals = append(vals, "d"+strconv.Itoa(i), e.Data)
		}
	}
	if last.End != "" {
		vals = append(vals, "e", last.End)
	}
	return vals
}

// isAddedBefore reports whether c is an XADD of adds that failed because
// its id is already in the log: a batch written again after a failure.
func isAddedBefore(c redis.Cmder, adds []*redis.StringCmd) bool {
	for _, a := range adds {
		if c == redis.Cmder(a) {
			return strings.Contains(a.Err().Error(), "equal or smaller")
		}
	}
	return false
}

func (s *redisStreams) StreamMeta(ctx context.Context, sid string) (StreamMeta, error) {
	vals, err := s.c.HMGet(ctx, streamKey(sid, "meta"), "owner", "format").Result()
	if err != nil {
		return StreamMeta{}, unavailable(err)
	}
	owner, ok1 := vals[0].(string)
	format, ok2 := vals[1].(string)
	if !ok1 || !ok2 {
		return StreamMeta{}, ErrNotFound
	}
	return StreamMeta{Owner: owner, Format: format}, nil
}

func (s *redisStreams) ReadStream(ctx context.Context, sid string, after uint64, count int, wait time.Duration) (Read, error) {
	block := time.Duration(-1)
	if wait > 0 {
		block = max(wait, time.Millisecond)
	}
	events, err := s.read(ctx, sid, after, count, block)
	if err != nil || len(events) > 0 {
		return Read{Events: events, Live: true}, err
	}
	n, err := s.c.Exists(ctx, streamKey(sid, "lease")).Result()
	if err != nil {
		return Read{}, unavailable(err)
	}
	if n == 1 {
		return Read{Live: true}, nil
	}
	// The lease is gone: what the producer wrote before it went is all
	// there will be.
	events, err = s.read(ctx, sid, after, count, -1)
	if err != nil || len(events) > 0 {
		return Read{Events: events, Live: ended(events)}, err
	}
	// Nothing after after: a stream that has ended ended there.
	end, err := s.end(ctx, sid)
	if err != nil || end == nil || end.ID > after {
		return Read{}, err
	}
	return Read{Events: []Event{*end}, Live: true}, nil
}

// end is sid's end event, nil when its log has none (yet).
func (s *redisStreams) end(ctx context.Context, sid string) (*Event, error) {
	msgs, err := s.c.XRevRangeN(ctx, streamKey(sid, "log"), "+", "-", 1).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	es, err := logEvents(msgs[0])
	if err != nil || es[len(es)-1].End == "" {
		return nil, err
	}
	return &es[len(es)-1], nil
}

func (s *redisStreams) read(ctx context.Context, sid string, after uint64, count int, block time.Duration) ([]Event, error) {
	res, err := s.c.XRead(ctx, &redis.XReadArgs{
		Streams: []string{streamKey(sid, "log"), strconv.FormatUint(after, 10) + "-0"},
		Count:   int64(count), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	var events []Event
	for _, st := range res {
		for _, m := range st.Messages {
			es, err := logEvents(m)
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				// An entry may begin before after (after is inside
				// it), or repeat events of the one before (a batch
				// written again after a failure whose write had
				// reached Redis, with newer events).
				if e.ID <= after {
					continue
				}
				if len(events) == 0 && e.ID-1 > after { // not after+1: it may overflow
					return nil, ErrTrimmed
				}
				events = append(events, e)
				after = e.ID
			}
		}
	}
	return events, nil
}

// logEvents are the events of log entry m (entryValues).
func logEvents(m redis.XMessage) ([]Event, error) {
	id, _, _ := strings.Cut(m.ID, "-")
	last, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return nil, errors.New("store: bad event id " + m.ID)
	}
	end, _ := m.Values["e"].(string)
	n := 1
	if v, ok := m.Values["n"].(string); ok {
		if n, err = strconv.Atoi(v); err != nil || n < 1 || uint64(n) > last {
			return nil, errors.New("store: bad event count in log entry " + m.ID)
		}
	}
	events := make([]Event, n)
	for i := range events {
		key := "d"
		if _, ok := m.Values["n"]; ok {
			key += strconv.Itoa(i)
		}
		d, _ := m.Values[key].(string)
		events[i] = Event{ID: last - uint64(n-1-i), Data: []byte(d)}
	}
	events[n-1].End = end
	return events, nil
}

func (s *redisStreams) AttendStream(ctx context.Context, sid string, d time.Duration) error {
	return unavailable(s.c.Set(ctx, streamKey(sid, "seen"), "1", d).Err())
}

func (s *redisStreams) CancelStream(ctx context.Context, sid string) error {
	n, err := cancelScript.Run(ctx, s.c, []string{streamKey(sid, "meta")}).Int()
	if err != nil {
		return unavailable(err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return unavailable(s.c.Publish(ctx, cancelChannel, sid).Err())
}

func (s *redisStreams) WatchCancels(ctx context.Context, ready func(), fn func(sid string)) error {
	sub := s.c.Subscribe(ctx, cancelChannel)
	defer sub.Close()
	// A cancelled ctx does not end a read from a Redis that has stopped
	// answering (SIGSTOPped, or a network that drops packets); closing the
	// subscription does, so the caller's stop never waits on Redis.
	defer context.AfterFunc(ctx, func() { sub.Close() })()
	if _, err := sub.Receive(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return unavailable(err)
	}
	ready()
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return unavailable(errors.New("cancel subscription closed"))
			}
			fn(m.Payload)
		}
	}
}
