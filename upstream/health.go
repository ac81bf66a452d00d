package upstream

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"
)

// maintain is the Client's background goroutine: it resolves dns names,
// health-checks targets every HealthInterval, closes idle streams and
// drops targets that left dns once they carry nothing. It exits when Close
// cancels root.
func (c *Client) maintain() {
	defer c.wg.Done()
	if len(c.names) > 0 {
		c.resolve()
		close(c.resolved)
	}
	tick := time.Second
	if h := c.opts.HealthInterval; h > 0 && h < tick {
		tick = h
	}
	if i := c.opts.IdleStreamTimeout; i > 0 && i/2 < tick {
		tick = max(i/2, 10*time.Millisecond)
	}
	tk := time.NewTicker(tick)
	defer tk.Stop()
	var nextHealth, nextResolve time.Time
	if c.opts.HealthInterval > 0 {
		// The first check runs at once: until a target has been checked,
		// pick prefers every checked one to it.
		c.checkAll()
		nextHealth = time.Now().Add(c.opts.HealthInterval)
	}
	nextResolve = time.Now().Add(c.opts.ResolveInterval)
	for {
		select {
		case <-c.root.Done():
			return
		case now := <-tk.C:
			if c.opts.HealthInterval > 0 && !now.Before(nextHealth) {
				c.checkAll()
				nextHealth = time.Now().Add(c.opts.HealthInterval)
			}
			c.seqs.sweep(now)
			for _, t := range c.targetList() {
				t.closeIdle(now)
			}
			if len(c.names) > 0 && !now.Before(nextResolve) {
				c.resolve()
				nextResolve = time.Now().Add(c.opts.ResolveInterval)
			}
			c.reap()
		}
	}
}

// checkAll health-checks every target at once and waits for the checks.
func (c *Client) checkAll() {
	var wg sync.WaitGroup
	for _, t := range c.targetList() {
		wg.Go(func() { t.check(c.root) })
	}
	wg.Wait()
}

// resolve looks every dns name up again and updates the target set: new
// addresses become targets, vanished ones are marked removed (reap closes
// them once drained). A failed lookup keeps the name's current targets.
func (c *Client) resolve() {
	cur := c.targetList()
	next := slices.Clone(cur)
	changed := false
	for _, name := range c.names {
		host, port, _ := splitHostPort(name)
		ctx, cancel := context.WithTimeout(c.root, 5*time.Second)
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		cancel()
		if err != nil {
			c.opts.Logger.Warn("upstream dns lookup failed", "name", name, "err", err)
			continue
		}
		want := map[string]bool{}
		for _, ip := range ips {
			want[net.JoinHostPort(ip, port)] = true
		}
		for _, t := range next {
			if t.name != name {
				continue
			}
			if want[t.addr] {
				delete(want, t.addr)
				t.removed.Store(false)
			} else if !t.removed.Swap(true) {
				c.opts.Logger.Info("upstream target left dns", "target", t.addr, "name", name)
			}
		}
		for addr := range want {
			t, err := newTarget(c, addr, name)
			if err != nil {
				c.opts.Logger.Warn("upstream target", "target", addr, "err", err)
				continue
			}
			next = append(next, t)
			changed = true
		}
	}
	if changed {
		c.targets.Store(&next)
	}
}

// reap drops removed targets that carry no requests and that no caller
// is about to use (pin).
func (c *Client) reap() {
	cur := c.targetList()
	var gone []*target
	keep := cur[:0:0]
	for _, t := range cur {
		if t.removed.Load() && t.retire() {
			gone = append(gone, t)
			continue
		}
		keep = append(keep, t)
	}
	if len(gone) == 0 {
		return
	}
	c.targets.Store(&keep)
	for _, t := range gone {
		t.close()
	}
}
