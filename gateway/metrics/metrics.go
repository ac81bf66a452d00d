// Package metrics keeps counters and gauges and writes them in the
// Prometheus text exposition format (version 0.0.4). Create a Registry,
// declare families with Counter and Gauge at startup, then update series
// with With(labels...).Add/Set from any goroutine.
package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ContentType is the media type of WriteText's output.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Registry holds metric families. Its methods are safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	families []*Family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Family is one metric name with its label names and series.
type Family struct {
	name, help, typ string
	labels          []string

	mu     sync.Mutex
	series map[string]*Value // key: label values joined by \xff
}

// Value is one series: a float updated atomically.
type Value struct {
	labels []string
	bits   atomic.Uint64
}

// Add adds d (which must be non-negative for counters).
func (v *Value) Add(d float64) {
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Inc adds 1.
func (v *Value) Inc() { v.Add(1) }

// Dec subtracts 1 (gauges only).
func (v *Value) Dec() { v.Add(-1) }

// Set sets the value (gauges only).
func (v *Value) Set(f float64) { v.bits.Store(math.Float64bits(f)) }

// Get returns the current value.
func (v *Value) Get() float64 { return math.Float64frombits(v.bits.Load()) }

func (r *Registry) family(name, help, typ string, labels []string) *Family {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.families {
		if f.name == name {
			panic("metrics: duplicate family " + name)
		}
	}
	f := &Family{name: name, help: help, typ: typ, labels: labels, series: map[string]*Value{}}
	r.families = append(r.families, f)
	return f
}

// Counter declares a counter family. It panics on a duplicate name.
func (r *Registry) Counter(name, help string, labels ...string) *Family {
	return r.family(name, help, "counter", labels)
}

// Gauge declares a gauge family. It panics on a duplicate name.
func (r *Registry) Gauge(name, help string, labels ...string) *Family {
	return r.family(name, help, "gauge", labels)
}

// With returns the series for the given label values, one per label name.
func (f *Family) With(values ...string) *Value {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("metrics: %s wants %d label values, got %d", f.name, len(f.labels), len(values)))
	}
	key := strings.Join(values, "\xff")
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.series[key]
	if !ok {
		v = &Value{labels: append([]string(nil), values...)}
		f.series[key] = v
	}
	return v
}

// WriteText writes every family in the text exposition format.
func (r *Registry) WriteText(w io.Writer) error {
	r.mu.Lock()
	fams := append([]*Family(nil), r.families...)
	r.mu.Unlock()
	var b []byte
	for _, f := range fams {
		b = append(b, "# HELP "...)
		b = append(b, f.name...)
		b = append(b, ' ')
		b = append(b, escapeHelp(f.help)...)
		b = append(b, "\n# TYPE "...)
		b = append(b, f.name...)
		b = append(b, ' ')
		b = append(b, f.typ...)
		b = append(b, '\n')
		f.mu.Lock()
		keys := make([]string, 0, len(f.series))
		for k := range f.series {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		vals := make([]*Value, len(keys))
		for i, k := range keys {
			vals[i] = f.series[k]
		}
		f.mu.Unlock()
		for _, v := range vals {
			b = append(b, f.name...)
			if len(f.labels) > 0 {
				b = append(b, '{')
				for i, l := range f.labels {
					if i > 0 {
						b = append(b, ',')
					}
					b = append(b, l...)
					b = append(b, '=')
					b = append(b, '"')
					b = append(b, labelEscaper.Replace(v.labels[i])...)
					b = append(b, '"')
				}
				b = append(b, '}')
			}
			b = append(b, ' ')
			b = strconv.AppendFloat(b, v.Get(), 'g', -1, 64)
			b = append(b, '\n')
		}
	}
	_, err := w.Write(b)
	return err
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
