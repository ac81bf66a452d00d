package metrics

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func newReader(t *testing.T) (*Registry, *sdkmetric.ManualReader) {
	t.Helper()
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return New(mp.Meter("test")), rd
}

// collect returns the data points of every instrument by name.
func collect(t *testing.T, rd *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func sumOf(t *testing.T, agg metricdata.Aggregation, kv ...attribute.KeyValue) int64 {
	t.Helper()
	want := attribute.NewSet(kv...)
	sum, ok := agg.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("aggregation %T, want Sum[int64]", agg)
	}
	for _, dp := range sum.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	t.Fatalf("no series %v in %+v", kv, sum.DataPoints)
	return 0
}

func TestRecord(t *testing.T) {
	r, rd := newReader(t)
	reqs := r.Counter("gw.requests", "{request}", "Requests by route.", "route", "code")
	active := r.Gauge("gw.active", "{request}", "Active streams.")
	lat := r.Histogram("gw.latency", "s", "Latency.", []float64{0.1, 1}, "model")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				reqs.With("/v1/x", "200").Inc()
			}
		})
	}
	wg.Wait()
	reqs.With(`a"b`, "500").Add(2)
	a := active.With()
	a.Inc()
	a.Inc()
	a.Dec()
	lat.With("m").Record(context.Background(), 0.5)
	lat.With("m").Record(context.Background(), 2)

	got := collect(t, rd)
	if v := sumOf(t, got["gw.requests"], attribute.String("route", "/v1/x"), attribute.String("code", "200")); v != 800 {
		t.Errorf("requests /v1/x 200 = %d, want 800", v)
	}
	if v := sumOf(t, got["gw.requests"], attribute.String("route", `a"b`), attribute.String("code", "500")); v != 2 {
		t.Errorf("requests a\"b 500 = %d, want 2", v)
	}
	if v := sumOf(t, got["gw.active"]); v != 1 {
		t.Errorf("active = %d, want 1", v)
	}
	h, ok := got["gw.latency"].(metricdata.Histogram[float64])
	if !ok || len(h.DataPoints) != 1 {
		t.Fatalf("latency %+v", got["gw.latency"])
	}
	dp := h.DataPoints[0]
	if dp.Count != 2 || dp.Sum != 2.5 || len(dp.BucketCounts) != 3 || dp.BucketCounts[1] != 1 || dp.BucketCounts[2] != 1 {
		t.Errorf("latency point %+v, want one in (0.1,1] and one above 1", dp)
	}
}

// TestSeriesAsTheSDKReports: a series is reported from its first
// measurement on, not from With; a counter is monotonic and a gauge not;
// a later collection sees the running totals.
func TestSeriesAsTheSDKReports(t *testing.T) {
	r, rd := newReader(t)
	c := r.Counter("gw.c", "{x}", "", "k")
	g := r.Gauge("gw.g", "{x}", "", "k")
	c.With("kept")
	g.With("kept")
	c.With("zero").Add(0)
	g.With("back").Inc()
	g.With("back").Dec()
	got := collect(t, rd)
	for _, name := range []string{"gw.c", "gw.g"} {
		if n := len(got[name].(metricdata.Sum[int64]).DataPoints); n != 1 {
			t.Errorf("%s: %d series, want 1 (With alone reports none)", name, n)
		}
	}
	if v := sumOf(t, got["gw.c"], attribute.String("k", "zero")); v != 0 {
		t.Errorf("c zero = %d", v)
	}
	if v := sumOf(t, got["gw.g"], attribute.String("k", "back")); v != 0 {
		t.Errorf("g back = %d", v)
	}
	if !got["gw.c"].(metricdata.Sum[int64]).IsMonotonic || got["gw.g"].(metricdata.Sum[int64]).IsMonotonic {
		t.Error("want the counter monotonic and the gauge not")
	}
	c.With("zero").Add(3)
	g.With("back").Dec()
	got = collect(t, rd)
	if v := sumOf(t, got["gw.c"], attribute.String("k", "zero")); v != 3 {
		t.Errorf("c zero = %d, want 3", v)
	}
	if v := sumOf(t, got["gw.g"], attribute.String("k", "back")); v != -1 {
		t.Errorf("g back = %d, want -1", v)
	}
}

// Recording never allocates, on the real SDK, with and without a sampled
// span in the context (exemplars).
func TestRecordDoesNotAllocate(t *testing.T) {
	r, _ := newReader(t)
	events := r.Counter("gw.events", "{event}", "", "protocol").With("sse")
	active := r.Gauge("gw.active", "{request}", "", "protocol").With("sse")
	ttft := r.Histogram("gw.ttft", "s", "", []float64{0.01, 0.1}, "model").With("m")

	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	traced, span := tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()

	for name, f := range map[string]func(){
		"counter":           events.Inc,
		"counter add":       func() { events.Add(3) },
		"gauge":             func() { active.Inc(); active.Dec() },
		"histogram":         func() { ttft.Record(context.Background(), 0.05) },
		"histogram sampled": func() { ttft.Record(traced, 0.05) },
	} {
		f() // the first measurement of a series may set it up
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per measurement, want 0", name, n)
		}
	}
}

func TestPanics(t *testing.T) {
	r, _ := newReader(t)
	c := r.Counter("x", "", "", "a")
	for name, fn := range map[string]func(){
		"missing label":   func() { c.With() },
		"extra label":     func() { c.With("1", "2") },
		"too many labels": func() { r.Counter("y", "", "", "a", "b", "c", "d", "e") },
		"bad name":        func() { r.Counter("9 bad name", "", "") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}()
	}
}

func BenchmarkCounterInc(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	v := New(mp.Meter("bench")).Counter("events", "{event}", "", "protocol").With("sse")
	b.ReportAllocs()
	for b.Loop() {
		v.Inc()
	}
}
