package upstream

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestInfo(t *testing.T) {
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if ok, err := c.ServerLive(ctx); !ok || err != nil {
		t.Fatalf("ServerLive = %v, %v", ok, err)
	}
	if ok, err := c.ServerReady(ctx); !ok || err != nil {
		t.Fatalf("ServerReady = %v, %v", ok, err)
	}
	md, err := c.ServerMetadata(ctx)
	if err != nil || !slices.Contains(md.GetExtensions(), cancelExtension) {
		t.Fatalf("ServerMetadata = %v, %v", md, err)
	}
	if ok, err := c.ModelReady(ctx, "repeat_int32", ""); !ok || err != nil {
		t.Fatalf("ModelReady = %v, %v", ok, err)
	}
	mm, err := c.ModelMetadata(ctx, "repeat_int32", "")
	if err != nil || len(mm.GetInputs()) != 3 || mm.GetOutputs()[0].GetName() != "OUT" {
		t.Fatalf("ModelMetadata = %v, %v", mm, err)
	}
	if again, _ := c.ModelMetadata(ctx, "repeat_int32", ""); again != mm {
		t.Fatal("ModelMetadata not cached")
	}
	cfg, err := c.ModelConfig(ctx, "repeat_int32", "")
	if err != nil || !cfg.GetModelTransactionPolicy().GetDecoupled() {
		t.Fatalf("ModelConfig = %v, %v", cfg, err)
	}
	cfg, err = c.ModelConfig(ctx, "identity_int32", "")
	if err != nil || cfg.GetModelTransactionPolicy().GetDecoupled() {
		t.Fatalf("ModelConfig = %v, %v", cfg, err)
	}
	_, err = c.ModelMetadata(ctx, "nope", "")
	if status.Code(err) != codes.NotFound {
		t.Fatalf("ModelMetadata(nope) = %v, want NotFound", err)
	}
	models, err := c.RepositoryIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range models {
		names = append(names, m.GetName())
	}
	for _, want := range []string{"repeat_int32", "square_int32", "identity_int32"} {
		if !slices.Contains(names, want) {
			t.Fatalf("RepositoryIndex %v lacks %s", names, want)
		}
	}
	st, err := c.ModelStatistics(ctx, "identity_int32", "1")
	if err != nil || len(st.GetModelStats()) != 1 || st.GetModelStats()[0].GetName() != "identity_int32" || st.GetModelStats()[0].GetVersion() != "1" {
		t.Fatalf("ModelStatistics(identity_int32) = %v, %v", st, err)
	}
	if st, err := c.ModelStatistics(ctx, "", ""); err != nil || len(st.GetModelStats()) < 3 {
		t.Fatalf("ModelStatistics() = %v, %v", st, err)
	}
	if _, err := c.ModelStatistics(ctx, "nope", ""); status.Code(err) == codes.OK {
		t.Fatal("ModelStatistics(nope) succeeded")
	}
}
