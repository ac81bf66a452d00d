package store

import (
	"context"
	"fmt"
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
	// "" takes none. A slot not given back expires after SlotLease (its
	// replica died).
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

// SlotLease is how long a concurrency slot lives when its request never
// settles (its replica died).
const SlotLease = 10 * time.Minute

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

type redisLimits struct{ c redis.UniversalClient }

func (s *redisLimits) init(c redis.UniversalClient) { s.c = c }

// admitScript is Admit: KEYS rpm, tpm, slots; ARGV rpm, tpm,
// concurrency, requests, tokens, slot, lease (µs). Times are Redis's own
// clock (TIME), so replicas' clocks do not matter.
var admitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
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
	out, err := admitScript.Run(ctx, s.c, limitKeys(id), l.RPM, l.TPM, l.Concurrency, t.Requests, res, slot, SlotLease.Microseconds()).Slice()
	if err != nil {
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
	}
	return v, nil
}

// settleScript is Settle: KEYS tpm, slots; ARGV tpm, tokens, slot.
var settleScript = redis.NewScript(`
if ARGV[3] ~= '' then redis.call('ZREM', KEYS[2], ARGV[3]) end
local tpm, delta = tonumber(ARGV[1]), tonumber(ARGV[2])
if tpm > 0 and delta ~= 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
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
	k := limitKeys(id)
	if err := settleScript.Run(ctx, s.c, k[1:], l.TPM, tokens, slot).Err(); err != nil {
		return unavailable(err)
	}
	return nil
}

// memLimits keeps limits in this process, with the same arithmetic.
type memLimits struct {
	mu   sync.Mutex
	keys map[string]*memLimit
	now  func() time.Time
}

type memLimit struct {
	rpm, tpm int64            // tat, µs since the epoch
	slots    map[string]int64 // slot -> expiry
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
		k = &memLimit{slots: map[string]int64{}}
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
		for slot, exp := range k.slots {
			if exp <= now {
				delete(k.slots, slot)
			}
		}
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
			k.slots[t.Slot] = now + SlotLease.Microseconds()
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
