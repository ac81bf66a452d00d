package engine

import (
	"maps"
	"slices"
	"time"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Forming and starting a sequence batch: the direct and oldest
// strategies, the rows of a batch (padding for idle slots, the control
// inputs) and the implicit state kept between a sequence's requests.

// startLocked frees the slots whose front is a null request, then forms
// and starts in's next batch.
func (s *sequencer) startLocked(in *seqInstance, now time.Time) {
	for i := 0; in.nulls > 0 && i < len(in.slots); i++ {
		sl := in.slots[i]
		// A null request is always last in its queue: its id is
		// forgotten, so nothing joins the slot until it is freed.
		if len(sl.queue) > 0 && sl.queue[0] == nil {
			sl.queue = sl.queue[1:]
			in.waiting--
			in.nulls--
			s.releaseSlotLocked(sl)
		}
	}
	var rows []*seqSlot // the slot of each row; nil is padding
	if s.cfg.oldest {
		rows = s.formOldestLocked(in, now)
	} else {
		rows = s.formDirectLocked(in, now)
	}
	if rows == nil {
		return
	}
	b := &batch{instance: in.index, started: now, size: len(rows)}
	b.calls = b.one[:0]
	var members []*seqPending
	var rep *backend.Request // a real request, copied for padding rows
	for i, sl := range rows {
		if sl == nil {
			continue
		}
		p := sl.queue[0]
		sl.queue[0] = nil
		sl.queue = sl.queue[1:]
		p.slot = nil
		in.waiting--
		in.running++
		s.queued--
		sl.running = p.c
		s.prepareLocked(sl, p.c)
		if p.c.seq.end {
			s.releaseSlotLocked(sl)
		}
		members = append(members, p)
		b.calls = append(b.calls, p.c)
		b.rowOf = append(b.rowOf, i)
		if rep == nil {
			rep = p.c.req
		}
	}
	if len(members) < len(rows) {
		b.rows = make([]*backend.Request, len(rows))
		for i, c := range b.calls {
			b.rows[b.rowOf[i]] = c.req
		}
		for i := range b.rows {
			if b.rows[i] == nil {
				b.rows[i] = s.paddingRow(rep)
			}
		}
	} else {
		b.rowOf = nil // rows are the calls, in order
	}
	if len(b.calls) > 1 {
		b.done = make(chan struct{})
	}
	in.busy = true
	s.progress = now
	for _, p := range members {
		p.ready <- admission{b: b}
	}
}

// formDirectLocked returns the rows of the direct strategy's next batch:
// slots 0 up to the highest one with a request, nil for an empty one. With
// max_queue_delay and minimum_slot_utilization set it waits until enough
// slots have a request or the oldest front request has waited the delay.
func (s *sequencer) formDirectLocked(in *seqInstance, now time.Time) []*seqSlot {
	top, ready := -1, 0
	var oldest time.Time
	for i, sl := range in.slots {
		if len(sl.queue) > 0 && sl.queue[0] != nil {
			top = i
			ready++
			if oldest.IsZero() || sl.queue[0].enqueued.Before(oldest) {
				oldest = sl.queue[0].enqueued
			}
		}
	}
	if top < 0 {
		return nil
	}
	if s.cfg.delay > 0 && s.cfg.minUtil > 0 && now.Sub(oldest) < s.cfg.delay && float64(ready)/float64(s.cfg.maxBatch) < s.cfg.minUtil {
		s.armLocked(oldest.Add(s.cfg.delay))
		return nil
	}
	rows := make([]*seqSlot, top+1)
	for i := range rows {
		if q := in.slots[i].queue; len(q) > 0 && q[0] != nil {
			rows[i] = in.slots[i]
		}
	}
	return rows
}

// formOldestLocked returns the slots whose front requests make the oldest
// strategy's next batch: the oldest fronts, as the dynamic batcher picks
// them (the largest preferred size reached runs at once; otherwise what
// there is runs once it cannot grow, the oldest has waited the delay, or
// at once without a delay).
func (s *sequencer) formOldestLocked(in *seqInstance, now time.Time) []*seqSlot {
	var cands []*seqSlot
	for _, sl := range in.slots {
		if len(sl.queue) > 0 && sl.running == nil && sl.queue[0] != nil {
			cands = append(cands, sl)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	slices.SortFunc(cands, func(a, b *seqSlot) int { return a.queue[0].enqueued.Compare(b.queue[0].enqueued) })
	size := min(len(cands), s.cfg.maxBatch)
	if s.cfg.maxBatch > 1 {
		oldest := cands[0].queue[0].enqueued
		delayOver := s.cfg.delay > 0 && now.Sub(oldest) >= s.cfg.delay
		best := 0
		for _, n := range s.cfg.preferred {
			if n <= size {
				best = n
			}
		}
		full := len(cands) >= s.cfg.maxBatch
		switch {
		case best > 0 && !delayOver:
			size = best
		case full || size >= s.cfg.preferred[len(s.cfg.preferred)-1] || delayOver || s.cfg.delay == 0:
		default:
			s.armLocked(oldest.Add(s.cfg.delay))
			return nil
		}
	}
	return cands[:size]
}

// prepareLocked gives c, about to run in sl, its control inputs and
// implicit state; a START resets the state.
func (s *sequencer) prepareLocked(sl *seqSlot, c *call) {
	c.slot, c.slotGen = sl, sl.gen
	s.cfg.setControls(c.req.Inputs, c.seq, true)
	if len(s.cfg.states) == 0 {
		return
	}
	if c.seq.start {
		sl.state = nil
	}
	for _, st := range s.cfg.states {
		t := sl.state[st.input]
		if t == nil {
			t = st.initial
		}
		c.req.Inputs[st.input] = t
	}
}

// paddingRow is a copy of rep with the not-ready controls and the initial
// state (Triton's CopyAsNull): the model must ignore it.
func (s *sequencer) paddingRow(rep *backend.Request) *backend.Request {
	r := *rep
	r.ID = ""
	r.Inputs = maps.Clone(rep.Inputs)
	s.cfg.setControls(r.Inputs, seqFlags{}, false)
	for _, st := range s.cfg.states {
		r.Inputs[st.input] = st.initial
	}
	return &r
}

// keepState takes the implicit state outputs out of resp and stores them
// as the next state of c's slot, unless the slot has moved on to another
// sequence. A response left with nothing (no outputs, no parameters)
// becomes nil: there is nothing to send.
func (s *sequencer) keepState(c *call, resp *backend.Response) *backend.Response {
	if len(s.cfg.states) == 0 || c.slot == nil || resp == nil {
		return resp
	}
	var outs []*tensor.Tensor
	var kept map[string]*tensor.Tensor
	for _, t := range resp.Outputs {
		i := slices.IndexFunc(s.cfg.states, func(st stateConfig) bool { return st.output == t.Name })
		if i < 0 {
			outs = append(outs, t)
			continue
		}
		if kept == nil {
			kept = map[string]*tensor.Tensor{}
		}
		in := s.cfg.states[i].input
		kept[in] = &tensor.Tensor{Name: in, Datatype: t.Datatype, Shape: t.Shape, Raw: t.Raw}
	}
	if kept == nil {
		return resp
	}
	s.mu.Lock()
	if c.slot.gen == c.slotGen {
		if c.slot.state == nil {
			c.slot.state = map[string]*tensor.Tensor{}
		}
		maps.Copy(c.slot.state, kept)
	}
	s.mu.Unlock()
	if len(outs) == 0 && len(resp.Parameters) == 0 {
		return nil
	}
	return &backend.Response{Outputs: outs, Parameters: resp.Parameters}
}
