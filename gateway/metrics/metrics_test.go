package metrics

import (
	"strings"
	"sync"
	"testing"
)

func TestWriteText(t *testing.T) {
	r := NewRegistry()
	reqs := r.Counter("gw_requests_total", "Requests by route.", "route", "code")
	active := r.Gauge("gw_active", "Active streams.")
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
	active.With().Set(3)
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := `# HELP gw_requests_total Requests by route.
# TYPE gw_requests_total counter
gw_requests_total{route="/v1/x",code="200"} 800
gw_requests_total{route="a\"b",code="500"} 2
# HELP gw_active Active streams.
# TYPE gw_active gauge
gw_active 3
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestPanics(t *testing.T) {
	r := NewRegistry()
	f := r.Counter("x", "")
	for _, fn := range []func(){func() { r.Gauge("x", "") }, func() { f.With("extra") }} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			fn()
		}()
	}
}
