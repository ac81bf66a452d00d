package store_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/gateway/store/redistest"
)

// Instrument counts each command sent to Redis by its name.
func TestInstrumentCountsCommands(t *testing.T) {
	srv := redistest.Start(t)
	s, err := store.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	if err := s.(*store.Redis).Instrument(mp.Meter("test")); err != nil {
		t.Fatal(err)
	}
	counts := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		if err := rd.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "streamgate.gateway.store_commands" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					v, _ := dp.Attributes.Value(attribute.Key("command"))
					out[v.AsString()] += dp.Value
				}
			}
		}
		return out
	}
	for range 2 {
		if err := s.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// A new connection's handshake (hello, client setinfo) counts too.
	if c := counts(); c["ping"] != 2 {
		t.Fatalf("after two pings: %v", c)
	}
	before := counts()
	if _, err := s.LookupKey(t.Context(), store.HashSecret("sg-nope")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lookup of a missing key: %v", err)
	}
	after := counts()
	grew := false
	for name, n := range after {
		grew = grew || n > before[name]
	}
	if !grew {
		t.Fatalf("a key lookup counted no command: %v, then %v", before, after)
	}
}
