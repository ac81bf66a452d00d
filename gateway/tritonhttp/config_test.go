package tritonhttp

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// ModelConfig prints protobuf's JSON as Triton's core reprints it: field
// names and order of the .proto, defaults of scalars, lists and maps,
// enums by name, Triton's 64-bit fields as numbers and the others as
// strings.
func TestModelConfig(t *testing.T) {
	cfg := &pb.ModelConfig{}
	err := prototext.Unmarshal([]byte(`
name: "identity_fp32"
backend: "identity"
max_batch_size: 8
version_policy { specific { versions: [1, 3] } }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 2 ] reshape { shape: [ 2, -1 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5 }
  priority_queue_policy { key: 2 value { max_queue_size: 3 } }
  priority_queue_policy { key: 10 value { } }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "b" value { string_value: "2" } }
parameters { key: "a" value { string_value: "1" } }
model_transaction_policy { decoupled: true }
`), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := string(ModelConfig(cfg))
	want := `{"name":"identity_fp32","platform":"","backend":"identity","runtime":"",` +
		`"version_policy":{"specific":{"versions":[1,3]}},"max_batch_size":8,` +
		`"input":[{"name":"INPUT0","data_type":"TYPE_FP32","format":"FORMAT_NONE","dims":[-1,2],"reshape":{"shape":[2,-1]},` +
		`"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false,"is_non_linear_format_io":false}],` +
		`"output":[{"name":"OUTPUT0","data_type":"TYPE_STRING","dims":[-1],"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],` +
		`"dynamic_batching":{"preferred_batch_size":[4],"max_queue_delay_microseconds":100,"preserve_ordering":false,` +
		`"priority_levels":2,"default_priority_level":0,` +
		`"default_queue_policy":{"timeout_action":"DELAY","default_timeout_microseconds":5,"allow_timeout_override":false,"max_queue_size":0},` +
		`"priority_queue_policy":{"2":{"timeout_action":"REJECT","default_timeout_microseconds":0,"allow_timeout_override":false,"max_queue_size":3},` +
		`"10":{"timeout_action":"REJECT","default_timeout_microseconds":0,"allow_timeout_override":false,"max_queue_size":0}}},` +
		`"instance_group":[{"name":"","kind":"KIND_CPU","count":2,"gpus":[],"secondary_devices":[],"profile":[],"passive":false,"host_policy":""}],` +
		`"default_model_filename":"","parameters":{"a":{"string_value":"1"},"b":{"string_value":"2"}},` +
		`"model_transaction_policy":{"decoupled":true}}`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if !json.Valid([]byte(got)) {
		t.Error("not JSON")
	}
	if got := string(ModelConfig(&pb.ModelConfig{})); got != "" {
		t.Errorf("empty config printed %q", got)
	}
	// A 64-bit field Triton leaves alone stays a string; a float prints as
	// protobuf then rapidjson print it.
	sb := &pb.ModelConfig{Name: "s", SchedulingChoice: &pb.ModelConfig_SequenceBatching{SequenceBatching: &pb.ModelSequenceBatching{
		MaxSequenceIdleMicroseconds: 7,
		StrategyChoice: &pb.ModelSequenceBatching_Direct{Direct: &pb.ModelSequenceBatching_StrategyDirect{
			MaxQueueDelayMicroseconds: 9, MinimumSlotUtilization: 0.5}},
		State: []*pb.ModelSequenceBatching_State{{Dims: []int64{4}, InitialState: []*pb.ModelSequenceBatching_InitialState{{Dims: []int64{5}}}}},
	}}}
	got = string(ModelConfig(sb))
	want = `"sequence_batching":{"direct":{"max_queue_delay_microseconds":9,"minimum_slot_utilization":0.5},` +
		`"max_sequence_idle_microseconds":7,"control_input":[],"state":[{"input_name":"","output_name":"","data_type":"TYPE_INVALID","dims":[4],` +
		`"initial_state":[{"data_type":"TYPE_INVALID","dims":["5"],"name":""}],"use_same_buffer_for_input_output":false,"use_growable_memory":false}],"iterative_sequence":false}`
	if !strings.Contains(got, want) {
		t.Errorf("sequence batching:\n%s\nlacks\n%s", got, want)
	}
}

func TestStatistics(t *testing.T) {
	d := func(c, ns uint64) *pb.StatisticDuration { return &pb.StatisticDuration{Count: c, Ns: ns} }
	got := string(Statistics(&pb.ModelStatisticsResponse{ModelStats: []*pb.ModelStatistics{{
		Name: "m", Version: "1", LastInference: 1700000000123, InferenceCount: 3, ExecutionCount: 2,
		InferenceStats: &pb.InferStatistics{Success: d(3, 300), Fail: d(1, 10), Queue: d(3, 30),
			ComputeInput: d(3, 3), ComputeInfer: d(3, 200), ComputeOutput: d(3, 4)},
		BatchStats:    []*pb.InferBatchStatistics{{BatchSize: 1, ComputeInput: d(1, 1), ComputeInfer: d(1, 2), ComputeOutput: d(1, 3)}},
		MemoryUsage:   []*pb.MemoryUsage{{Type: "CPU", Id: 0, ByteSize: 64}},
		ResponseStats: map[string]*pb.InferResponseStatistics{"1": {Success: d(1, 5)}, "0": {ComputeInfer: d(1, 6)}},
	}, {Name: "n", Version: "2"}}}))
	z := `{"count":0,"ns":0}`
	want := `{"model_stats":[{"name":"m","version":"1","last_inference":1700000000123,"inference_count":3,"execution_count":2,` +
		`"inference_stats":{"success":{"count":3,"ns":300},"fail":{"count":1,"ns":10},"queue":{"count":3,"ns":30},` +
		`"compute_input":{"count":3,"ns":3},"compute_infer":{"count":3,"ns":200},"compute_output":{"count":3,"ns":4},` +
		`"cache_hit":` + z + `,"cache_miss":` + z + `},` +
		`"response_stats":{"0":{"compute_infer":{"count":1,"ns":6},"compute_output":` + z + `,"success":` + z + `,"fail":` + z + `,"empty_response":` + z + `,"cancel":` + z + `},` +
		`"1":{"compute_infer":` + z + `,"compute_output":` + z + `,"success":{"count":1,"ns":5},"fail":` + z + `,"empty_response":` + z + `,"cancel":` + z + `}},` +
		`"batch_stats":[{"batch_size":1,"compute_input":{"count":1,"ns":1},"compute_infer":{"count":1,"ns":2},"compute_output":{"count":1,"ns":3}}],` +
		`"memory_usage":[{"type":"CPU","id":0,"byte_size":64}]},` +
		`{"name":"n","version":"2","last_inference":0,"inference_count":0,"execution_count":0,"inference_stats":{"success":` + z + `,"fail":` + z +
		`,"queue":` + z + `,"compute_input":` + z + `,"compute_infer":` + z + `,"compute_output":` + z + `,"cache_hit":` + z + `,"cache_miss":` + z +
		`},"response_stats":{},"batch_stats":[],"memory_usage":[]}]}`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := string(Statistics(&pb.ModelStatisticsResponse{})); got != `{"model_stats":[]}` {
		t.Errorf("no models: %s", got)
	}
}

func TestRepositoryIndex(t *testing.T) {
	models := []*pb.RepositoryIndexResponse_ModelIndex{
		{Name: "a", Version: "1", State: "READY"},
		{Name: "b", State: "UNAVAILABLE", Reason: "unloaded"},
	}
	if got := string(RepositoryIndex(models, false)); got != `[{"name":"a","version":"1","state":"READY"},{"name":"b","state":"UNAVAILABLE","reason":"unloaded"}]` {
		t.Errorf("all: %s", got)
	}
	if got := string(RepositoryIndex(models, true)); got != `[{"name":"a","version":"1","state":"READY"}]` {
		t.Errorf("ready: %s", got)
	}
	for _, tc := range []struct {
		body  string
		ready bool
		err   string
	}{
		{"", false, ""},
		{`{}`, false, ""},
		{`{"ready":true}`, true, ""},
		{`[true]`, false, ""},
		{`{"ready":1}`, false, "attempt to access JSON non-boolean as boolean"},
		{`{"ready":`, false, "failed to parse the request JSON buffer: unexpected end of JSON input at line 1, column 10 (offset 9)"},
	} {
		ready, err := ParseIndexRequest([]byte(tc.body))
		if ready != tc.ready || (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("ParseIndexRequest(%q) = %v, %v; want %v, %q", tc.body, ready, err, tc.ready, tc.err)
		}
	}
}
