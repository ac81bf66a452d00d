package engine

import (
	"container/heap"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/proto/tensor"
)

// The sequencer is Triton's sequence batcher (sequence_batching): it pins
// every request of a sequence (a correlation id, from its START request to
// its END) to one sequence slot of one instance, runs a slot's requests one
// after another, and gives the model the control inputs (START, END,
// READY, CORRID) and implicit state of each row. A request runs once the
// one before it in its slot is over (its last response handed to the
// stream), not merely released, so a decoupled model's responses come
// out in sequence order.
//
// Each instance has cfg.slots slots. A START for an unknown id takes the
// free slot with the lowest index (spreading sequences over instances);
// with none free it waits in a FIFO backlog until a slot frees, whole. An
// instance runs one batch at a time (it is busy until released, as with
// the scheduler): with the direct strategy a batch holds the front request
// of every slot up to the highest one that has one, as rows in slot order
// with padding rows (READY false) in the gaps; with the oldest strategy it
// holds the oldest front requests, up to max_batch_size, formed like the
// dynamic batcher's (preferred sizes, queue delay), without padding.
//
// The id→slot mapping is dropped when the END request is queued (later
// requests of the id need START), and the slot is freed when that END is
// put in a batch. One timer serves the idle reaper (a sequence whose last
// request arrived max_sequence_idle ago gets a null request in its slot,
// which frees the slot when it reaches the front; the model sees no END),
// the backlog's request timeouts and the direct strategy's batch delay.
//
// A request cancelled while it waits cancels its whole sequence: every
// other waiting request of it fails with a CANCELLED error, and its slot
// (or backlog queue) is freed.
type sequencer struct {
	cfg   seqConfig
	model string
	log   *slog.Logger

	mu        sync.Mutex
	insts     []*seqInstance
	free      slotHeap
	active    map[seqID]*seqSlot      // sequences holding a slot, until their END is queued
	backlogOf map[seqID]*backlogQueue // backlogged sequences, until their END is queued
	backlog   []*backlogQueue         // FIFO
	seen      map[seqID]time.Time     // last arrival per id, for the reaper
	queued    int                     // requests waiting in slots and the backlog
	closed    bool
	timer     *time.Timer // reaper, backlog timeouts, batch delay
	timerAt   time.Time   // when timer fires; zero when not armed
	progress  time.Time   // last time a batch started or an instance was freed
}

// seqInstance is one model instance and its slots.
type seqInstance struct {
	index   int
	busy    bool // running a batch, until released
	running int  // calls of its batches not over yet
	slots   []*seqSlot
	waiting int // entries in its slots' queues, null requests included
	nulls   int // null requests in its slots' queues
}

// seqSlot is one sequence slot: the requests of the sequence it holds, in
// arrival order (nil is the reaper's null request), and its state.
type seqSlot struct {
	inst    *seqInstance
	index   int
	running *call // the slot's request that is not over yet
	queue   []*seqPending
	state   map[string]*tensor.Tensor // implicit state by input name
	gen     uint64                    // counts the sequences it held; a state update of an older one is dropped
}

// seqPending is one request waiting in a slot or the backlog.
type seqPending struct {
	c        *call
	enqueued time.Time
	ready    chan admission
	slot     *seqSlot      // the slot it waits in
	backlog  *backlogQueue // the backlog queue it waits in
}

// backlogQueue is a backlogged sequence's requests.
type backlogQueue struct {
	items   []*seqPending
	expires time.Time // the earliest timeout of its requests; zero: none
}

// reaperRecheck is how soon an idle sequence still in the backlog is
// looked at again (Triton's 50 ms).
const reaperRecheck = 50 * time.Millisecond

func errBatchSize(model string) error {
	return errorf(codes.InvalidArgument, "inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher", model)
}

func errNoCorrID(model string) error {
	return errorf(codes.InvalidArgument, "inference request to model '%s' must specify a non-zero or non-empty correlation ID", model)
}

func errNoStart(model string, id seqID) error {
	return errorf(codes.InvalidArgument, "inference request for sequence %s to model '%s' must specify the START flag on the first request of the sequence", id, model)
}

// errSeqTimeout fails a backlogged sequence whose request timeout passed.
var errSeqTimeout = errorf(codes.Unavailable, "timeout of the corresponding sequence has been expired")

// errSeqCancelled fails the other waiting requests of a sequence one of
// whose requests was cancelled. Triton answers them CANCELLED with an
// empty message; an in-band error needs a text to be seen as one.
func errSeqCancelled(model string, id seqID) error {
	return errorf(codes.Canceled, "sequence %s of model '%s' was cancelled", id, model)
}

func newSequencer(cfg seqConfig, model string, instances int) *sequencer {
	s := &sequencer{
		cfg: cfg, model: model, log: slog.Default(),
		active: map[seqID]*seqSlot{}, backlogOf: map[seqID]*backlogQueue{}, seen: map[seqID]time.Time{},
		progress: time.Now(),
	}
	for i := range instances {
		in := &seqInstance{index: i}
		for j := range cfg.slots {
			sl := &seqSlot{inst: in, index: j}
			in.slots = append(in.slots, sl)
			s.free = append(s.free, sl)
		}
		s.insts = append(s.insts, in)
	}
	heap.Init(&s.free)
	return s
}

// enqueue queues c in its sequence's slot (or the backlog), or records
// why it cannot be (c.queueErr). A stream calls it in its reader, so that
// a sequence's requests queue in the order they arrived on the stream, as
// Triton's stream handler enqueues them; submit then waits.
func (s *sequencer) enqueue(c *call) {
	if c.queued != nil || c.queueErr != nil {
		return
	}
	if c.batchSize > 1 {
		c.queueErr = errBatchSize(s.model)
		return
	}
	if c.seq.id.none() {
		c.queueErr = errNoCorrID(s.model)
		return
	}
	now := time.Now()
	p := &seqPending{c: c, enqueued: now, ready: make(chan admission, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enqueueLocked(p, now); err != nil {
		c.queueErr = err
		return
	}
	c.queued = p
	s.dispatchLocked(now)
}

// submit enqueues c unless that is done, and waits until it is part of a
// batch that has an instance, or until it fails.
func (s *sequencer) submit(ctx context.Context, c *call) (*batch, error) {
	s.enqueue(c)
	if c.queueErr != nil {
		return nil, c.queueErr
	}
	p := c.queued
	select {
	case a := <-p.ready:
		return a.b, a.err
	default:
	}
	select {
	case a := <-p.ready:
		return a.b, a.err
	case <-ctx.Done():
		if s.cancel(p) {
			return nil, ctx.Err()
		}
		// Already in a batch (it runs, and sees ctx done) or failed.
		a := <-p.ready
		return a.b, a.err
	}
}

// enqueueLocked applies Triton's rules for where a request goes (SBS
// Enqueue): the slot or backlog queue of its id, else a free slot or a new
// backlog queue if it starts a sequence, else the START-flag error.
func (s *sequencer) enqueueLocked(p *seqPending, now time.Time) error {
	if s.closed {
		return errSchedulerStopped
	}
	f := p.c.seq
	slot, inSlot := s.active[f.id]
	bl, inBacklog := s.backlogOf[f.id]
	if !f.start && !inSlot && !inBacklog {
		return errNoStart(s.model, f.id)
	}
	s.seen[f.id] = now
	if f.start && (inSlot || inBacklog) {
		s.log.Warn("sequence "+f.id.String()+" for model '"+s.model+"' has a conflict. The previous sequence did not end before this sequence start. Previous sequence will be terminated early.",
			"model", s.model, "sequence_id", f.id.String())
	}
	switch {
	case inSlot:
		s.addLocked(slot, p)
		if f.end {
			delete(s.active, f.id)
		}
	case inBacklog:
		s.addBacklogLocked(bl, p, now)
		if f.end {
			delete(s.backlogOf, f.id)
		}
	case s.free.Len() > 0:
		slot = heap.Pop(&s.free).(*seqSlot)
		slot.gen++
		s.addLocked(slot, p)
		if !f.end {
			s.active[f.id] = slot
		}
	default:
		bl = &backlogQueue{}
		s.addBacklogLocked(bl, p, now)
		s.backlog = append(s.backlog, bl)
		if !f.end {
			s.backlogOf[f.id] = bl
		}
	}
	s.queued++
	s.armLocked(now.Add(s.cfg.idle))
	return nil
}

func (s *sequencer) addLocked(sl *seqSlot, p *seqPending) {
	p.slot = sl
	sl.queue = append(sl.queue, p)
	sl.inst.waiting++
}

// addBacklogLocked appends p to bl; a request's timeout parameter (µs)
// bounds how long the whole backlog queue may wait.
func (s *sequencer) addBacklogLocked(bl *backlogQueue, p *seqPending, now time.Time) {
	p.backlog = bl
	bl.items = append(bl.items, p)
	if us := p.c.timeoutMicros; us > 0 {
		exp := now.Add(time.Duration(us) * time.Microsecond)
		if bl.expires.IsZero() || exp.Before(bl.expires) {
			bl.expires = exp
			s.armLocked(exp)
		}
	}
}

// releaseSlotLocked frees sl, whose queue is empty: the oldest backlog
// queue moves into it whole, or it becomes free.
func (s *sequencer) releaseSlotLocked(sl *seqSlot) {
	sl.gen++
	sl.state = nil
	if len(s.backlog) == 0 {
		heap.Push(&s.free, sl)
		return
	}
	bl := s.backlog[0]
	s.backlog[0] = nil
	s.backlog = s.backlog[1:]
	last := bl.items[len(bl.items)-1].c.seq
	if !last.end {
		// The sequence is still open: its later requests go to the slot.
		delete(s.backlogOf, last.id)
		s.active[last.id] = sl
	}
	for _, p := range bl.items {
		p.backlog = nil
		s.addLocked(sl, p)
	}
}

// cancel handles p's context ending while it waits: its whole sequence is
// cancelled (true), or p was no longer waiting (false).
func (s *sequencer) cancel(p *seqPending) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	id := p.c.seq.id
	var others []*seqPending
	switch {
	case p.backlog != nil:
		bl := p.backlog
		s.backlog = slices.DeleteFunc(s.backlog, func(q *backlogQueue) bool { return q == bl })
		if s.backlogOf[id] == bl {
			delete(s.backlogOf, id)
		}
		others = bl.items
		for _, q := range bl.items {
			q.backlog = nil
		}
	case p.slot != nil:
		sl := p.slot
		for _, q := range sl.queue {
			sl.inst.waiting--
			if q == nil {
				sl.inst.nulls--
				continue
			}
			q.slot = nil
			others = append(others, q)
		}
		sl.queue = nil
		if s.active[id] == sl {
			delete(s.active, id)
		}
		s.releaseSlotLocked(sl)
	default:
		return false
	}
	if _, ok := s.active[id]; !ok {
		if _, ok := s.backlogOf[id]; !ok {
			delete(s.seen, id)
		}
	}
	for _, q := range others {
		s.queued--
		if q != p {
			q.ready <- admission{err: errSeqCancelled(s.model, id)}
		}
	}
	s.dispatchLocked(time.Now())
	return true
}

// release frees an instance and starts what can start.
func (s *sequencer) release(instance int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.insts[instance].busy = false
	now := time.Now()
	s.progress = now
	s.dispatchLocked(now)
}

// dispatchLocked starts a batch on every idle instance that has work.
func (s *sequencer) dispatchLocked(now time.Time) {
	if s.closed {
		return
	}
	for _, in := range s.insts {
		// The direct strategy starts a batch once the last one is over
		// (Triton waits for the payload's release); oldest once the
		// instance is free, with the slots whose last request is over.
		if !in.busy && in.waiting > 0 && (s.cfg.oldest || in.running == 0) {
			s.startLocked(in, now)
		}
	}
}

// finished is called once c, which ran in a slot, is over: the slot's
// next request may run.
func (s *sequencer) finished(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := c.slot
	if sl.running == c {
		sl.running = nil
	}
	sl.inst.running--
	s.dispatchLocked(time.Now())
}

// armLocked makes tick run at t, unless it runs earlier already.
func (s *sequencer) armLocked(t time.Time) {
	if !s.timerAt.IsZero() && !t.Before(s.timerAt) {
		return
	}
	s.timerAt = t
	d := time.Until(t)
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.tick)
		return
	}
	s.timer.Reset(d)
}

// tick is the reaper (Triton's ReaperThread): idle sequences in slots get
// a null request, backlog queues past their timeout fail, and batches
// waiting for the direct strategy's delay are looked at again.
func (s *sequencer) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.timerAt = time.Time{}
	now := time.Now()
	var next time.Time
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for id, last := range s.seen {
		if due := last.Add(s.cfg.idle); now.Before(due) {
			soonest(due)
			continue
		}
		if sl, ok := s.active[id]; ok {
			delete(s.active, id)
			delete(s.seen, id)
			sl.queue = append(sl.queue, nil)
			sl.inst.waiting++
			sl.inst.nulls++
		} else if _, ok := s.backlogOf[id]; ok {
			soonest(now.Add(reaperRecheck))
		} else {
			delete(s.seen, id)
		}
	}
	kept := s.backlog[:0]
	for _, bl := range s.backlog {
		if bl.expires.IsZero() || now.Before(bl.expires) {
			if !bl.expires.IsZero() {
				soonest(bl.expires)
			}
			kept = append(kept, bl)
			continue
		}
		id := bl.items[0].c.seq.id
		if s.backlogOf[id] == bl {
			delete(s.backlogOf, id)
		}
		for _, p := range bl.items {
			p.backlog = nil
			s.queued--
			p.ready <- admission{err: errSeqTimeout}
		}
	}
	clear(s.backlog[len(kept):])
	s.backlog = kept
	s.dispatchLocked(now)
	if !next.IsZero() {
		s.armLocked(next)
	}
}

// stalled reports whether requests wait in slots while every instance
// that has them has been busy, with nothing started or finished for
// longer than after.
func (s *sequencer) stalled(now time.Time, after time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	waiting := false
	for _, in := range s.insts {
		if in.waiting > in.nulls {
			if !in.busy {
				return false
			}
			waiting = true
		}
	}
	return waiting && now.Sub(s.progress) > after
}

// pending is the number of requests waiting in slots and the backlog.
func (s *sequencer) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued
}

// close fails every waiting request and refuses new ones.
func (s *sequencer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	fail := func(p *seqPending) {
		if p != nil {
			p.slot, p.backlog = nil, nil
			p.ready <- admission{err: errSchedulerStopped}
		}
	}
	for _, in := range s.insts {
		for _, sl := range in.slots {
			for _, p := range sl.queue {
				fail(p)
			}
			sl.queue = nil
		}
		in.waiting, in.nulls = 0, 0
	}
	for _, bl := range s.backlog {
		for _, p := range bl.items {
			fail(p)
		}
	}
	s.backlog, s.queued = nil, 0
	clear(s.active)
	clear(s.backlogOf)
	clear(s.seen)
}

// slotHeap orders free slots by slot index, then instance, as Triton's
// ready slot queue does, so sequences spread over the instances.
type slotHeap []*seqSlot

func (h slotHeap) Len() int { return len(h) }
func (h slotHeap) Less(i, j int) bool {
	if h[i].index != h[j].index {
		return h[i].index < h[j].index
	}
	return h[i].inst.index < h[j].inst.index
}
func (h slotHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *slotHeap) Push(x any)   { *h = append(*h, x.(*seqSlot)) }
func (h *slotHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}
