package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limit is what one API key may use; a zero field is no limit.
type Limit struct {
	// RPM is requests per minute.
	RPM int `json:"rpm,omitempty"`
	// TPM is tokens (prompt plus completion) per minute.
	TPM int `json:"tpm,omitempty"`
	// Concurrency is the requests in flight at once.
	Concurrency int `json:"concurrency,omitempty"`
}

// Take is what one admission takes from a key's limits.
type Take struct {
	// Requests to count against RPM (1 for a request, 0 when only its
	// tokens are reserved).
	Requests int
	// Tokens to reserve against TPM; more than TPM reserves TPM, so that
	// one large request may still run when the key's minute is unused.
	Tokens int
	// Slot names a concurrency slot to hold until Settle gives it back;
	// "" takes none. In Redis the replica that took it renews its lease
	// (SlotLease) while it holds it, so the slot of a replica that died
	// frees within SlotLease.
	Slot string
}

// Window is the state of one per-minute limit, for OpenAI's
// x-ratelimit-{limit,remaining,reset}-* headers. Limit 0: no limit.
type Window struct {
	Limit, Remaining int
	// Reset is the time until the limit is back to its full minute.
	Reset time.Duration
}

// Verdict is the answer of Admit.
type Verdict struct {
	// Limited names the limit that refused the take ("requests", "tokens"
	// or "concurrency"); "" means it was taken.
	Limited string
	// RetryAfter is when the take could succeed, when Limited is set.
	RetryAfter time.Duration
	// Reserved is the tokens reserved (Take.Tokens, at most TPM).
	Reserved int
	// Requests and Tokens are the windows after the admission.
	Requests, Tokens Window
}

// The limit names of Verdict.Limited.
const (
	LimitRequests    = "requests"
	LimitTokens      = "tokens"
	LimitConcurrency = "concurrency"
)

// Limits is the part of Store for per-key limits, shared by every
// replica. RPM and TPM are GCRA (a leaky bucket a minute deep: a key may
// use its whole minute at once, then at the steady rate); concurrency is
// a set of leased slots. Admit and Settle are each one atomic step (one
// Lua script, one round trip in Redis): no read-then-write race between
// replicas.
type Limits interface {
	// Admit takes t from key id's limits l, all of it or nothing.
	Admit(ctx context.Context, id string, l Limit, t Take) (Verdict, error)
	// Settle ends an admitted request: it gives back slot ("" none) and
	// corrects the key's tokens by tokens (used minus reserved; negative
	// gives tokens back).
	Settle(ctx context.Context, id string, l Limit, slot string, tokens int) error
}

// SlotLease is how long a concurrency slot lives in Redis unless the
// replica holding it renews it: every SlotLease/3 while its request
// runs. A replica that dies (or loses Redis for longer) frees its
// slots within SlotLease.
const SlotLease = 15 * time.Second

// limitPeriod is the window of RPM and TPM.
const limitPeriod = time.Minute

// gcra is one per-minute limit's arithmetic, in microseconds: tat is the
// theoretical arrival time (when the bucket is empty again), at least
// now. It is what the Lua script does, for Memory.
func gcra(tat, now int64, limit, cost int) (next int64, ok bool) {
	tat = max(tat, now)
	iv := float64(limitPeriod.Microseconds()) / float64(limit)
	next = tat + int64(math.Round(float64(cost)*iv))
	return next, next-now <= limitPeriod.Microseconds()
}

func window(limit int, tat, now int64) Window {
	if limit <= 0 {
		return Window{}
	}
	used := max(tat-now, 0)
	iv := float64(limitPeriod.Microseconds()) / float64(limit)
	rem := int(math.Floor(float64(limitPeriod.Microseconds()-used) / iv))
	return Window{Limit: limit, Remaining: max(rem, 0), Reset: time.Duration(used) * time.Microsecond}
}

func reserve(l Limit, t Take) int {
	if l.TPM <= 0 {
		return t.Tokens
	}
	return min(t.Tokens, l.TPM)
}

// In Redis a key's limits live under its id's hash tag: one Cluster slot.
func limitKeys(id string) []string {
	p := "sg:{" + id + "}:"
	return []string{p + "rpm", p + "tpm", p + "slots"}
}

// redisLimits keeps limits in Redis, and renews the leases of the slots
// this replica holds.
type redisLimits struct {
	c     redis.UniversalClient
	lease time.Duration
	// now is the scripts' clock; nil: Redis's own (TIME), so that
	// replicas' clocks do not matter. Tests set it to drive leases.
	now func() time.Time

	// failClosed refuses admissions while Redis fails (ErrUnavailable);
	// otherwise local admits them by this replica's share of each limit.
	failClosed bool
	local      memLimits
	replicas   func() int                                // replicas sharing the limits, at least 1
	localUsed  func(ctx context.Context, limited string) // counts a local admission; may be nil
	localLog   localLog

	mu      sync.Mutex
	localIn map[string]struct{}            // key id + "\x00" + slot admitted locally
	held    map[string]map[string]struct{} // key id -> slots held here
	down    map[string]time.Time           // key id -> until when Redis is not asked (failing)
	renewer chan struct{}                  // closed to stop the renewer; nil: none started
	stopped chan struct{}                  // closed when the renewer has returned
	closed  bool
}

func (s *redisLimits) init(c redis.UniversalClient, replicas func() int) {
	s.c, s.lease, s.replicas = c, SlotLease, replicas
	s.held = map[string]map[string]struct{}{}
	s.down = map[string]time.Time{}
	s.localIn = map[string]struct{}{}
	s.local.init()
}

// SetLimitsOnFailure chooses what Admit does while Redis fails: closed
// answers ErrUnavailable (the gateway's 503); open (the default, as
// Envoy's rate-limit filter) admits by this replica's share of each
// limit (the limit divided by the replicas last seen, rounded up),
// counted in streamgate.gateway.limits_local. After a failure a key's
// limits are not asked of Redis for failingFor (a second), so that a
// hung Redis costs a request one timeout, not one per limit call. Call
// it before use.
func (r *Redis) SetLimitsOnFailure(open bool) { r.redisLimits.failClosed = !open }

// SetLogger gives r a logger for what it decides on its own while Redis
// fails: local admissions (SetLimitsOnFailure) are logged at most once
// every 10s with their counts. Call it before use.
func (r *Redis) SetLogger(l *slog.Logger) { r.redisLimits.localLog.log = l }

// share is this replica's part of l when n replicas share it.
func share(l Limit, n int) Limit {
	part := func(v int) int {
		if v <= 0 {
			return v
		}
		return (v + n - 1) / n
	}
	return Limit{RPM: part(l.RPM), TPM: part(l.TPM), Concurrency: part(l.Concurrency)}
}

// admitLocally is Admit while Redis fails, with the store open.
func (s *redisLimits) admitLocally(ctx context.Context, id string, l Limit, t Take) (Verdict, error) {
	v, err := s.local.Admit(ctx, id, share(l, s.replicas()), t)
	if err != nil {
		return v, err
	}
	if v.Limited == "" && t.Slot != "" {
		s.mu.Lock()
		s.localIn[id+"\x00"+t.Slot] = struct{}{}
		s.mu.Unlock()
	}
	if s.localUsed != nil {
		s.localUsed(ctx, v.Limited)
	}
	s.localLog.note(v.Limited)
	return v, nil
}

// localLogEvery is how often, at most, a replica logs the admissions it
// decided locally while Redis failed.
const localLogEvery = 10 * time.Second

// localLog logs local admissions, rate-limited: the first at once, then
// at most one line per localLogEvery with the counts since the last.
type localLog struct {
	log *slog.Logger // nil: none

	mu                sync.Mutex
	last              time.Time
	admitted, refused int
	now               func() time.Time // tests; nil: time.Now
}

// clock is the time by l.now (tests) or time.Now.
func (l *localLog) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// note counts one local decision (limited: the limit that refused it, ""
// when admitted) and logs the counts when a line is due.
func (l *localLog) note(limited string) {
	if l.log == nil {
		return
	}
	l.mu.Lock()
	if limited == "" {
		l.admitted++
	} else {
		l.refused++
	}
	t := l.clock()
	if !l.last.IsZero() && t.Sub(l.last) < localLogEvery {
		l.mu.Unlock()
		return
	}
	admitted, refused := l.admitted, l.refused
	l.last, l.admitted, l.refused = t, 0, 0
	l.mu.Unlock()
	l.log.Warn("per-key limits decided by this replica's share: the shared store fails (--limits-on-store-failure open); counts since the last such line",
		"admitted", admitted, "refused", refused)
}

// settleLocally settles slot locally when it was admitted locally.
func (s *redisLimits) settleLocally(ctx context.Context, id string, l Limit, slot string, tokens int) bool {
	if slot == "" {
		return false
	}
	s.mu.Lock()
	_, ok := s.localIn[id+"\x00"+slot]
	delete(s.localIn, id+"\x00"+slot)
	s.mu.Unlock()
	if ok {
		s.local.Settle(ctx, id, share(l, s.replicas()), slot, tokens)
	}
	return ok
}

// clock is the scripts' now argument in µs; 0: Redis's TIME.
func (s *redisLimits) clock() int64 {
	if s.now == nil {
		return 0
	}
	return s.now().UnixMicro()
}

// hold records that this replica holds slot of key id, and starts the
// renewer with the first slot.
func (s *redisLimits) hold(id, slot string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.held[id] == nil {
		s.held[id] = map[string]struct{}{}
	}
	s.held[id][slot] = struct{}{}
	if s.renewer == nil {
		s.renewer, s.stopped = make(chan struct{}), make(chan struct{})
		go s.renewLoop(s.renewer, s.stopped)
	}
}

// release forgets slot of key id.
func (s *redisLimits) release(id, slot string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held[id], slot)
	if len(s.held[id]) == 0 {
		delete(s.held, id)
	}
}

// renewLoop renews the held slots every lease/3 until stop is closed.
func (s *redisLimits) renewLoop(stop, stopped chan struct{}) {
	defer close(stopped)
	t := time.NewTicker(s.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.lease/3)
			s.renew(ctx) // a failure is retried at the next tick
			cancel()
		}
	}
}

// renewScript extends the leases of slots still in the set: KEYS slots;
// ARGV lease (µs), now (µs, 0: TIME), slots. A slot that expired is not
// brought back: another request may hold its place now.
var renewScript = redis.NewScript(`
local lease, now = tonumber(ARGV[1]), tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local n = 0
for i = 3, #ARGV do n = n + redis.call('ZADD', KEYS[1], 'XX', 'CH', now + lease, ARGV[i]) end
if n > 0 then redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000)) end
return n`)

// renew extends the lease of every slot this replica holds: one round
// trip per key that holds slots. It returns the first failure.
func (s *redisLimits) renew(ctx context.Context) error {
	s.mu.Lock()
	work := make(map[string][]any, len(s.held))
	for id, slots := range s.held {
		args := []any{s.lease.Microseconds(), s.clock()}
		for slot := range slots {
			args = append(args, slot)
		}
		work[id] = args
	}
	s.mu.Unlock()
	var first error
	for id, args := range work {
		if err := renewScript.Run(ctx, s.c, limitKeys(id)[2:], args...).Err(); err != nil && first == nil {
			first = unavailable(err)
		}
	}
	return first
}

// close stops the renewer; the slots still held expire within the lease.
func (s *redisLimits) close() {
	s.mu.Lock()
	s.closed = true
	stop, stopped := s.renewer, s.stopped
	s.renewer = nil
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		<-stopped
	}
}

// admitScript is Admit: KEYS rpm, tpm, slots; ARGV rpm, tpm,
// concurrency, requests, tokens, slot, lease (µs), now (µs; 0: Redis's
// own clock, TIME).
var admitScript = redis.NewScript(`
local now = tonumber(ARGV[8])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local period = 60000000
local function take(key, limit, cost)
  if limit <= 0 then return true, now, now end
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local nxt = tat + math.floor(cost * period / limit + 0.5)
  return nxt - now <= period, tat, nxt
end
local rpm, tpm, conc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local okR, tatR, nextR = take(KEYS[1], rpm, tonumber(ARGV[4]))
local okT, tatT, nextT = take(KEYS[2], tpm, tonumber(ARGV[5]))
local slot, lease = ARGV[6], tonumber(ARGV[7])
local okC = true
if conc > 0 and slot ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  okC = redis.call('ZCARD', KEYS[3]) < conc
end
local limited, retry = '', 0
if not okC then limited, retry = 'concurrency', 1000000 end
if not okT then limited, retry = 'tokens', math.max(retry, nextT - now - period) end
if not okR then limited, retry = 'requests', math.max(retry, nextR - now - period) end
if limited == '' then
  if nextR > tatR then
    redis.call('SET', KEYS[1], string.format('%.0f', nextR), 'PX', math.ceil((nextR - now) / 1000) + 1)
  end
  if nextT > tatT then
    redis.call('SET', KEYS[2], string.format('%.0f', nextT), 'PX', math.ceil((nextT - now) / 1000) + 1)
  end
  if conc > 0 and slot ~= '' then
    redis.call('ZADD', KEYS[3], now + lease, slot)
    redis.call('PEXPIRE', KEYS[3], math.ceil(lease / 1000))
  end
  tatR, tatT = nextR, nextT
end
return {limited, string.format('%.0f', retry), string.format('%.0f', tatR - now), string.format('%.0f', tatT - now)}`)

func (s *redisLimits) Admit(ctx context.Context, id string, l Limit, t Take) (Verdict, error) {
	res := reserve(l, t)
	slot := t.Slot
	if l.Concurrency <= 0 {
		slot = ""
	}
	err := s.failing(id)
	var out []any
	if err == nil {
		out, err = admitScript.Run(ctx, s.c, limitKeys(id), l.RPM, l.TPM, l.Concurrency, t.Requests, res, slot, s.lease.Microseconds(), s.clock()).Slice()
		s.noteFailure(id, err)
	}
	if err != nil {
		if !s.failClosed && errors.Is(unavailable(err), ErrUnavailable) {
			return s.admitLocally(ctx, id, l, t)
		}
		return Verdict{}, unavailable(err)
	}
	if len(out) != 4 {
		return Verdict{}, fmt.Errorf("store: admit script answered %v", out)
	}
	var n [3]int64
	for i := range n {
		str, _ := out[i+1].(string)
		if _, err := fmt.Sscan(str, &n[i]); err != nil {
			return Verdict{}, fmt.Errorf("store: admit script answered %v", out)
		}
	}
	v := Verdict{
		Requests: window(l.RPM, n[1], 0),
		Tokens:   window(l.TPM, n[2], 0),
	}
	v.Limited, _ = out[0].(string)
	if v.Limited != "" {
		v.RetryAfter = time.Duration(n[0]) * time.Microsecond
	} else {
		v.Reserved = res
		if slot != "" {
			s.hold(id, slot)
		}
	}
	return v, nil
}

// settleScript is Settle: KEYS tpm, slots; ARGV tpm, tokens, slot, now
// (µs; 0: TIME).
var settleScript = redis.NewScript(`
if ARGV[3] ~= '' then redis.call('ZREM', KEYS[2], ARGV[3]) end
local tpm, delta = tonumber(ARGV[1]), tonumber(ARGV[2])
if tpm > 0 and delta ~= 0 then
  local now = tonumber(ARGV[4])
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  if tat < now then tat = now end
  local nxt = tat + math.floor(delta * 60000000 / tpm + 0.5)
  if nxt <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], string.format('%.0f', nxt), 'PX', math.ceil((nxt - now) / 1000) + 1)
  end
end
return 1`)

func (s *redisLimits) Settle(ctx context.Context, id string, l Limit, slot string, tokens int) error {
	if s.settleLocally(ctx, id, l, slot, tokens) {
		return nil
	}
	if slot != "" {
		// Not renewed from now on, given back or not: a slot whose
		// settlement fails expires within the lease.
		s.release(id, slot)
	}
	if err := s.failing(id); err != nil {
		return err
	}
	k := limitKeys(id)
	err := settleScript.Run(ctx, s.c, k[1:], l.TPM, tokens, slot, s.clock()).Err()
	s.noteFailure(id, err)
	return unavailable(err)
}

// failingFor is how long the limits of a key are not asked of Redis
// after Redis failed them: a request makes up to three limit calls (its
// requests, its tokens, its settlement), and on a hung Redis each would
// wait for the client's timeouts (seconds) before the outage policy
// decides. In a Cluster only the keys whose limits live on the failing
// master skip it.
const failingFor = time.Second

// failing is ErrUnavailable while the limits of key id failed in Redis
// less than failingFor ago (by the local log's clock).
func (s *redisLimits) failing(id string) error {
	now := s.localLog.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.down[id]
	if !ok {
		return nil
	}
	if now.Before(until) {
		return fmt.Errorf("%w: this key's limits failed in Redis less than %v ago", ErrUnavailable, failingFor)
	}
	delete(s.down, id)
	return nil
}

// noteFailure notes err, Redis's answer for id's limits.
func (s *redisLimits) noteFailure(id string, err error) {
	if err == nil || !errors.Is(unavailable(err), ErrUnavailable) {
		return
	}
	until := s.localLog.clock().Add(failingFor)
	s.mu.Lock()
	s.down[id] = until
	s.mu.Unlock()
}

// memLimits keeps limits in this process, with the same arithmetic.
type memLimits struct {
	mu   sync.Mutex
	keys map[string]*memLimit
	now  func() time.Time
}

type memLimit struct {
	rpm, tpm int64               // tat, µs since the epoch
	slots    map[string]struct{} // held until Settle: their holder is this process
}

func (s *memLimits) init() {
	s.keys = map[string]*memLimit{}
	s.now = time.Now
}

func (s *memLimits) Admit(_ context.Context, id string, l Limit, t Take) (Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	k := s.keys[id]
	if k == nil {
		k = &memLimit{slots: map[string]struct{}{}}
		s.keys[id] = k
	}
	res := reserve(l, t)
	nextR, okR := max(k.rpm, now), true
	if l.RPM > 0 {
		nextR, okR = gcra(k.rpm, now, l.RPM, t.Requests)
	}
	nextT, okT := max(k.tpm, now), true
	if l.TPM > 0 {
		nextT, okT = gcra(k.tpm, now, l.TPM, res)
	}
	okC := true
	useSlot := l.Concurrency > 0 && t.Slot != ""
	if useSlot {
		okC = len(k.slots) < l.Concurrency
	}
	var v Verdict
	period := limitPeriod.Microseconds()
	if !okC {
		v.Limited, v.RetryAfter = LimitConcurrency, time.Second
	}
	if !okT {
		v.Limited, v.RetryAfter = LimitTokens, max(v.RetryAfter, time.Duration(nextT-now-period)*time.Microsecond)
	}
	if !okR {
		v.Limited, v.RetryAfter = LimitRequests, max(v.RetryAfter, time.Duration(nextR-now-period)*time.Microsecond)
	}
	if v.Limited == "" {
		k.rpm, k.tpm = nextR, nextT
		if useSlot {
			k.slots[t.Slot] = struct{}{}
		}
		v.Reserved = res
	}
	v.Requests = window(l.RPM, max(k.rpm, now), now)
	v.Tokens = window(l.TPM, max(k.tpm, now), now)
	return v, nil
}

func (s *memLimits) Settle(_ context.Context, id string, l Limit, slot string, tokens int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[id]
	if k == nil {
		return nil
	}
	delete(k.slots, slot)
	if l.TPM > 0 && tokens != 0 {
		now := s.now().UnixMicro()
		k.tpm, _ = gcra(k.tpm, now, l.TPM, tokens)
	}
	return nil
}
