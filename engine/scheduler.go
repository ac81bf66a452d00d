package engine

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// The scheduler is Triton's dynamic batch scheduler in one type: a model's
// queue (priority levels, each with its queue policy: size limit, timeout,
// REJECT or DELAY on timeout), its idle instances, and the choice of which
// queued requests run together on which instance. A model without
// dynamic_batching gets the same scheduler with one level, no timeouts and
// batches of one, as Triton's default scheduler is its dynamic batcher with
// batching off.
//
// Requests wait in submit until dispatch puts them in a batch. dispatch
// runs under mu whenever something changes: a request arrives or leaves,
// an instance is freed, the batch delay's timer fires. It never blocks: it
// hands each batch to its requests' goroutines through their ready
// channels, and the first request's goroutine executes it (see run).
//
// The sequencer (sequencer.go, Triton's sequence_batching) is the other
// batcher over the same instances: it pins a sequence's requests to one
// instance slot. Requests, batches and their execution (call.go) know
// nothing of how the batch was chosen.
type scheduler struct {
	cfg schedConfig

	mu       sync.Mutex
	idle     []int             // idle instance indices
	levels   map[uint64]*level // by priority level
	order    []uint64          // keys of levels, ascending (1 is the highest priority)
	queued   int               // requests in all levels
	timed    int               // queued requests whose timeout is not applied yet
	earliest time.Time         // no deadline of a queued request is before it
	timer    *time.Timer       // the batch delay; nil until first needed
	scratch  []*pending        // formLocked's result, reused
	closed   bool              // no more requests; everyone queued was failed
	progress time.Time         // last time a batch started or an instance was freed
}

// schedConfig is a model's dynamic_batching in the form the scheduler uses.
type schedConfig struct {
	batching     bool          // several requests per execution (max_batch_size > 0 and dynamic_batching)
	maxBatch     int           // the most a batch holds (sum of the requests' batch sizes)
	preferred    []int         // preferred batch sizes, ascending; never empty when batching
	delay        time.Duration // max_queue_delay_microseconds
	levels       uint64        // priority_levels; 0 means one level (0)
	defaultLevel uint64        // default_priority_level
	policy       queuePolicy   // default_queue_policy
	policies     map[uint64]queuePolicy
	checkInputs  bool // the model has optional inputs: a batch holds requests with the same inputs
}

// queuePolicy is a ModelQueuePolicy.
type queuePolicy struct {
	timeout       time.Duration // default_timeout_microseconds; 0: none
	allowOverride bool          // a request's timeout may shorten it
	delay         bool          // timeout_action DELAY: a timed-out request goes behind the others
	maxSize       int           // requests waiting at this level
}

// maxQueue bounds the requests waiting at one priority level when the
// config sets no max_queue_size (Triton has no bound there).
const maxQueue = 16384

func newQueuePolicy(p *pb.ModelQueuePolicy) queuePolicy {
	q := queuePolicy{
		timeout:       time.Duration(p.GetDefaultTimeoutMicroseconds()) * time.Microsecond,
		allowOverride: p.GetAllowTimeoutOverride(),
		delay:         p.GetTimeoutAction() == pb.ModelQueuePolicy_DELAY,
		maxSize:       int(p.GetMaxQueueSize()),
	}
	if q.maxSize == 0 || q.maxSize > maxQueue {
		q.maxSize = maxQueue
	}
	return q
}

// newSchedConfig reads cfg's scheduling fields. Defaults follow Triton's
// config normalization: preferred_batch_size is max_batch_size when unset.
func newSchedConfig(cfg *pb.ModelConfig) schedConfig {
	db := cfg.GetDynamicBatching()
	sc := schedConfig{
		maxBatch:     1,
		levels:       db.GetPriorityLevels(),
		defaultLevel: db.GetDefaultPriorityLevel(),
		policy:       newQueuePolicy(db.GetDefaultQueuePolicy()),
		delay:        time.Duration(db.GetMaxQueueDelayMicroseconds()) * time.Microsecond,
	}
	for level, p := range db.GetPriorityQueuePolicy() {
		if sc.policies == nil {
			sc.policies = map[uint64]queuePolicy{}
		}
		sc.policies[level] = newQueuePolicy(p)
	}
	if db != nil && cfg.GetMaxBatchSize() > 0 {
		sc.batching = true
		sc.maxBatch = int(cfg.GetMaxBatchSize())
		for _, n := range db.GetPreferredBatchSize() {
			sc.preferred = append(sc.preferred, int(n))
		}
		if len(sc.preferred) == 0 {
			sc.preferred = []int{sc.maxBatch}
		}
		slices.Sort(sc.preferred)
		sc.preferred = slices.Compact(sc.preferred)
	}
	for _, in := range cfg.GetInput() {
		sc.checkInputs = sc.checkInputs || in.GetOptional()
	}
	return sc
}

// level is one priority level's queue: the requests in arrival order, then
// the ones whose timeout passed under the DELAY action.
type level struct {
	policy  queuePolicy
	items   []*pending
	delayed []*pending
}

func (l *level) len() int { return len(l.items) + len(l.delayed) }

// pending is one request in the queue.
type pending struct {
	c        *call
	size     int       // what it adds to a batch: its batch dimension, at least 1
	inputs   string    // its input names, when the model has optional inputs
	enqueued time.Time // for the batch delay
	deadline time.Time // when its queue timeout passes; zero: none, or applied
	ready    chan admission
}

// admission is what submit waits for: the batch the request runs in, or
// why it will not run.
type admission struct {
	b   *batch
	err error
}

func newScheduler(cfg schedConfig, instances int) *scheduler {
	s := &scheduler{cfg: cfg, levels: map[uint64]*level{}, progress: time.Now()}
	for i := instances - 1; i >= 0; i-- {
		s.idle = append(s.idle, i)
	}
	return s
}

// levelOf maps a request's priority to its level, as Triton does: 0 and
// values beyond priority_levels mean default_priority_level.
func (s *scheduler) levelOf(priority uint64) uint64 {
	if priority == 0 || priority > s.cfg.levels {
		return s.cfg.defaultLevel
	}
	return priority
}

// levelLocked returns the queue of a priority level, creating it.
func (s *scheduler) levelLocked(lv uint64) *level {
	if l, ok := s.levels[lv]; ok {
		return l
	}
	p, ok := s.cfg.policies[lv]
	if !ok {
		p = s.cfg.policy
	}
	l := &level{policy: p}
	s.levels[lv] = l
	i := sort.Search(len(s.order), func(i int) bool { return s.order[i] >= lv })
	s.order = slices.Insert(s.order, i, lv)
	return l
}

// submit queues c and waits until it is part of a batch that has an
// instance, or until it fails: queue full, timed out under REJECT, ctx done
// while queued (ctx's error), or the scheduler closed.
func (s *scheduler) submit(ctx context.Context, c *call) (*batch, error) {
	now := time.Now()
	p := &pending{c: c, size: c.batchSize, enqueued: now, ready: make(chan admission, 1)}
	if s.cfg.checkInputs {
		p.inputs = inputKey(c)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errSchedulerStopped
	}
	l := s.levelLocked(s.levelOf(c.priority))
	if l.len() >= l.policy.maxSize {
		s.mu.Unlock()
		return nil, errQueueFull
	}
	timeout := l.policy.timeout
	if want := time.Duration(c.timeoutMicros) * time.Microsecond; l.policy.allowOverride && want > 0 && want < timeout {
		timeout = want
	}
	if timeout > 0 {
		p.deadline = now.Add(timeout)
		s.timed++
		if s.earliest.IsZero() || p.deadline.Before(s.earliest) {
			s.earliest = p.deadline
		}
	}
	l.items = append(l.items, p)
	s.queued++
	s.dispatchLocked(now)
	s.mu.Unlock()

	// Most requests find an idle instance at once: no timer, no select.
	select {
	case a := <-p.ready:
		return a.b, a.err
	default:
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(time.Until(now.Add(timeout)))
		defer t.Stop()
		expired = t.C
	}
	for {
		select {
		case a := <-p.ready:
			return a.b, a.err
		case <-ctx.Done():
			if s.leave(p) {
				return nil, ctx.Err()
			}
			// Already in a batch: it runs, and sees ctx done.
			a := <-p.ready
			return a.b, a.err
		case <-expired:
			expired = nil
			if s.expire(p) {
				return nil, errTimeout
			}
		}
	}
}

// inputKey names the inputs a request has, for models with optional
// inputs: Triton batches only requests with the same inputs there.
func inputKey(c *call) string {
	names := make([]string, 0, len(c.req.Inputs))
	for name := range c.req.Inputs {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, "\x00")
}

// leave takes p out of the queue; false when it was no longer there (it is
// in a batch, or was failed).
func (s *scheduler) leave(p *pending) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.removeLocked(p) {
		return false
	}
	s.dispatchLocked(time.Now())
	return true
}

// expire applies the timeout action when p's timer fires: REJECT takes it
// out (true), DELAY puts it behind the level's unexpired requests. The
// batcher applies the same when it finds p expired first (applyLocked).
func (s *scheduler) expire(p *pending) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.levels[s.levelOf(p.c.priority)]
	if l == nil || p.deadline.IsZero() {
		return false // closed, or already applied
	}
	rejected := s.timeOutLocked(l, slices.Index(l.items, p))
	s.dispatchLocked(time.Now())
	return rejected
}

// timeOutLocked applies l's timeout action to l.items[i], whose deadline
// passed; true when it was rejected (and taken out).
func (s *scheduler) timeOutLocked(l *level, i int) bool {
	p := l.items[i]
	p.deadline = time.Time{}
	s.timed--
	l.items = slices.Delete(l.items, i, i+1)
	if l.policy.delay {
		l.delayed = append(l.delayed, p)
		return false
	}
	s.queued--
	return true
}

// applyLocked applies the timeout action to every queued request whose
// deadline passed, before a batch is formed, as Triton's batcher does;
// rejected requests are answered through their ready channel. It walks
// the queue only once the earliest deadline has come.
func (s *scheduler) applyLocked(now time.Time) {
	if s.timed == 0 || now.Before(s.earliest) {
		return
	}
	s.earliest = time.Time{}
	for _, lv := range s.order {
		l := s.levels[lv]
		for i := 0; i < len(l.items); {
			p := l.items[i]
			switch {
			case p.deadline.IsZero():
				i++
			case now.Before(p.deadline):
				if s.earliest.IsZero() || p.deadline.Before(s.earliest) {
					s.earliest = p.deadline
				}
				i++
			case s.timeOutLocked(l, i):
				p.ready <- admission{err: errTimeout}
			}
		}
	}
}

func (s *scheduler) removeLocked(p *pending) bool {
	l := s.levels[s.levelOf(p.c.priority)]
	if l == nil {
		return false
	}
	for _, list := range []*[]*pending{&l.items, &l.delayed} {
		if i := slices.Index(*list, p); i >= 0 {
			*list = slices.Delete(*list, i, i+1)
			s.queued--
			if !p.deadline.IsZero() {
				p.deadline = time.Time{}
				s.timed--
			}
			return true
		}
	}
	return false
}

// release returns an instance to the idle set and starts what can start.
func (s *scheduler) release(instance int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = append(s.idle, instance)
	now := time.Now()
	s.progress = now
	s.dispatchLocked(now)
}

// dispatchLocked starts batches while an instance is idle and requests
// wait, or arms the batch delay's timer when the batch may still grow.
func (s *scheduler) dispatchLocked(now time.Time) {
	for len(s.idle) > 0 && s.queued > 0 && !s.closed {
		s.applyLocked(now)
		if s.queued == 0 {
			return
		}
		members, wait := s.formLocked(now)
		if members == nil {
			s.armLocked(wait)
			return
		}
		instance := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		b := &batch{instance: instance, started: now}
		b.calls = b.one[:0]
		if len(members) > 1 {
			b.done = make(chan struct{})
		}
		for _, p := range members {
			s.removeLocked(p)
			b.calls = append(b.calls, p.c)
			b.size += p.size
		}
		s.progress = now
		for _, p := range members {
			p.ready <- admission{b: b}
		}
	}
}

// each calls f on the queued requests in scheduling order (priority
// level, then arrival, delayed ones last in their level) until f is false.
func (s *scheduler) eachLocked(f func(*pending) bool) {
	for _, lv := range s.order {
		l := s.levels[lv]
		for _, list := range [][]*pending{l.items, l.delayed} {
			for _, p := range list {
				if !f(p) {
					return
				}
			}
		}
	}
}

// formLocked picks the next batch the way Triton's dynamic batcher does:
// walk the queue in order while the batch stays within max_batch_size (and,
// for models with optional inputs, the requests have the same inputs);
// remember the largest preferred batch size reached. Run that preferred
// batch at once; otherwise run what there is once it cannot grow, once the
// oldest request has waited max_queue_delay, or at once when there is no
// delay. Else wait (the returned duration) for more requests.
func (s *scheduler) formLocked(now time.Time) ([]*pending, time.Duration) {
	members := s.scratch[:0]
	if !s.cfg.batching {
		for _, lv := range s.order {
			l := s.levels[lv]
			if len(l.items) > 0 {
				members = append(members, l.items[0])
			} else if len(l.delayed) > 0 {
				members = append(members, l.delayed[0])
			} else {
				continue
			}
			s.scratch = members
			return members, 0
		}
		return nil, 0
	}
	maxPreferred := s.cfg.preferred[len(s.cfg.preferred)-1]
	size, best, full := 0, 0, false
	var oldest time.Time
	s.eachLocked(func(p *pending) bool {
		if len(members) > 0 {
			if size+p.size > maxPreferred && best == 0 {
				best = len(members)
			}
			if size+p.size > s.cfg.maxBatch || (s.cfg.checkInputs && p.inputs != members[0].inputs) {
				full = true
				return false
			}
		}
		members = append(members, p)
		size += p.size
		if oldest.IsZero() || p.enqueued.Before(oldest) {
			oldest = p.enqueued
		}
		if _, ok := slices.BinarySearch(s.cfg.preferred, size); ok {
			best = len(members)
		}
		return true
	})
	s.scratch = members
	waited := now.Sub(oldest)
	delayOver := s.cfg.delay > 0 && waited >= s.cfg.delay
	switch {
	case best > 0 && !delayOver:
		return members[:best], 0
	case full || size >= maxPreferred || delayOver || s.cfg.delay == 0:
		return members, 0
	}
	return nil, s.cfg.delay - waited
}

// armLocked makes dispatch run again after d.
func (s *scheduler) armLocked(d time.Duration) {
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.wake)
		return
	}
	s.timer.Reset(d)
}

func (s *scheduler) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dispatchLocked(time.Now())
}

// stalled reports whether requests wait while every instance has been busy
// and nothing started or finished for longer than after.
func (s *scheduler) stalled(now time.Time, after time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued > 0 && len(s.idle) == 0 && now.Sub(s.progress) > after
}

// pending is the number of queued requests.
func (s *scheduler) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued
}

// close fails every queued request and refuses new ones.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.eachLocked(func(p *pending) bool {
		p.ready <- admission{err: errSchedulerStopped}
		return true
	})
	s.levels, s.order, s.queued, s.timed, s.earliest = map[uint64]*level{}, nil, 0, 0, time.Time{}
}
