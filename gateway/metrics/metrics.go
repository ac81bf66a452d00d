package metrics

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// maxLabels is the most label names one instrument may have.
const maxLabels = 4

// Registry declares instruments on one OpenTelemetry Meter. Its methods
// are safe for concurrent use; they panic on a wiring error (a bad name,
// too many labels), so declare instruments at startup.
type Registry struct {
	m metric.Meter
}

// New returns a registry declaring its instruments on m. A nil m records
// nowhere (a no-op meter).
func New(m metric.Meter) *Registry {
	if m == nil {
		m = noop.NewMeterProvider().Meter("")
	}
	return &Registry{m: m}
}

// Counter declares a monotonic counter: name in OpenTelemetry's dotted
// form, unit in UCUM ("{request}", "s", "By"), help its description, and
// the names of its labels (attributes).
func (r *Registry) Counter(name, unit, help string, labels ...string) *Counter {
	return &Counter{fam: totals[CounterValue](r, false, name, unit, help, labels)}
}

// Gauge declares a value that goes up and down (an UpDownCounter): in
// flight, open, in use.
func (r *Registry) Gauge(name, unit, help string, labels ...string) *Gauge {
	return &Gauge{fam: totals[GaugeValue](r, true, name, unit, help, labels)}
}

// totals declares an observable instrument, an up-down counter if
// upDown, else a counter, whose series (V embeds series) the SDK reads
// when it collects.
func totals[V any, P interface {
	*V
	observe(metric.Int64Observer)
	setLabels(attribute.Set)
}](r *Registry, upDown bool, name, unit, help string, labels []string) *family[V] {
	fam := newFamily(name, labels, func(set attribute.Set) *V {
		v := new(V)
		P(v).setLabels(set)
		return v
	})
	report := metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
		fam.each(func(v *V) { P(v).observe(o) })
		return nil
	})
	var err error
	if upDown {
		_, err = r.m.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(help), report)
	} else {
		_, err = r.m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(help), report)
	}
	must(name, err)
	return fam
}

// series is the running total of one series of a Counter or Gauge. The
// SDK reads it when it collects (an observable instrument's callback):
// an Add is one atomic add, where the SDK's own counter looked its
// series up by attribute set on every one. A series that was never
// added to is not reported, as the SDK reports none before its first
// measurement.
type series struct {
	n    atomic.Int64
	used atomic.Bool
	set  attribute.Set
}

func (s *series) setLabels(set attribute.Set) { s.set = set }

func (s *series) add(n int64) {
	s.n.Add(n)
	if !s.used.Load() {
		s.used.Store(true)
	}
}

func (s *series) observe(o metric.Int64Observer) {
	if s.used.Load() {
		o.Observe(s.n.Load(), metric.WithAttributeSet(s.set))
	}
}

// Histogram declares a distribution of float64 values with the given
// bucket boundaries (nil: the SDK's default ones).
func (r *Registry) Histogram(name, unit, help string, buckets []float64, labels ...string) *Histogram {
	opts := []metric.Float64HistogramOption{metric.WithUnit(unit), metric.WithDescription(help)}
	if buckets != nil {
		opts = append(opts, metric.WithExplicitBucketBoundaries(buckets...))
	}
	inst, err := r.m.Float64Histogram(name, opts...)
	must(name, err)
	return &Histogram{fam: newFamily(name, labels, func(set attribute.Set) *HistogramValue {
		return &HistogramValue{inst: inst, opts: []metric.RecordOption{metric.WithAttributeSet(set)}}
	})}
}

func must(name string, err error) {
	if err != nil {
		panic(fmt.Sprintf("metrics: instrument %s: %v", name, err))
	}
}

// Counter is a declared counter; With picks one series.
type Counter struct{ fam *family[CounterValue] }

// With returns the series for the given label values, one per label
// name; an empty value leaves its label out (error.type on success). It
// allocates only the first time it sees a combination.
func (c *Counter) With(values ...string) *CounterValue { return c.fam.with(values) }

// CounterValue is one series of a Counter.
type CounterValue struct{ series }

// Inc adds 1. It does not allocate.
func (v *CounterValue) Inc() { v.add(1) }

// Add adds n, which must not be negative. It does not allocate.
func (v *CounterValue) Add(n int64) { v.add(n) }

// Gauge is a declared up-down counter; With picks one series.
type Gauge struct{ fam *family[GaugeValue] }

// With returns the series for the given label values, as Counter.With.
func (g *Gauge) With(values ...string) *GaugeValue { return g.fam.with(values) }

// GaugeValue is one series of a Gauge.
type GaugeValue struct{ series }

// Inc adds 1. It does not allocate.
func (v *GaugeValue) Inc() { v.add(1) }

// Dec subtracts 1. It does not allocate.
func (v *GaugeValue) Dec() { v.add(-1) }

// Histogram is a declared histogram; With picks one series.
type Histogram struct{ fam *family[HistogramValue] }

// With returns the series for the given label values, as Counter.With.
func (h *Histogram) With(values ...string) *HistogramValue { return h.fam.with(values) }

// HistogramValue is one series of a Histogram.
type HistogramValue struct {
	inst metric.Float64Histogram
	opts []metric.RecordOption
}

// Record records v. ctx carries the span a sampled measurement is linked
// to as an exemplar. It does not allocate.
func (v *HistogramValue) Record(ctx context.Context, f float64) { v.inst.Record(ctx, f, v.opts...) }

// family maps label values to the series of one instrument.
type family[V any] struct {
	name   string
	labels []string
	mk     func(attribute.Set) *V

	mu     sync.RWMutex
	series map[[maxLabels]string]*V
}

func newFamily[V any](name string, labels []string, mk func(attribute.Set) *V) *family[V] {
	if len(labels) > maxLabels {
		panic(fmt.Sprintf("metrics: %s has %d labels, at most %d", name, len(labels), maxLabels))
	}
	return &family[V]{name: name, labels: append([]string(nil), labels...), mk: mk, series: map[[maxLabels]string]*V{}}
}

// each calls fn with every series, in no order.
func (f *family[V]) each(fn func(*V)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, v := range f.series {
		fn(v)
	}
}

func (f *family[V]) with(values []string) *V {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("metrics: %s wants %d label values, got %d", f.name, len(f.labels), len(values)))
	}
	var k [maxLabels]string
	copy(k[:], values)
	f.mu.RLock()
	v, ok := f.series[k]
	f.mu.RUnlock()
	if ok {
		return v
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.series[k]; ok {
		return v
	}
	kvs := make([]attribute.KeyValue, 0, len(values))
	for i, val := range values {
		if val != "" { // absent, as Prometheus reads an empty label
			kvs = append(kvs, attribute.String(f.labels[i], val))
		}
	}
	v = f.mk(attribute.NewSet(kvs...))
	f.series[k] = v
	return v
}
