package bench

import (
	"testing"
	"time"
)

// The spawned servers' serving lines are found in either log format, and
// in the gateway's older form.
func TestServingLine(t *testing.T) {
	for _, tc := range []struct {
		l         servingLine
		line, out string
	}{
		{gatewayServing, `{"time":"t","level":"INFO","msg":"gateway serving","url":"http://127.0.0.1:41549","protocols":"{HTTP1}"}`, "127.0.0.1:41549"},
		{gatewayServing, `time=t level=INFO msg="gateway serving" url=http://127.0.0.1:41549 protocols={HTTP1}`, "127.0.0.1:41549"},
		{gatewayServing, `time=t level=INFO msg="gateway serving" http=127.0.0.1:80 upstream=[127.0.0.1:1]`, "127.0.0.1:80"},
		{engineServing, `{"time":"t","level":"INFO","msg":"engine serving","grpc":"127.0.0.1:43317","tls":false}`, "127.0.0.1:43317"},
		{engineServing, `time=t level=INFO msg="engine serving" grpc=127.0.0.1:43317 tls=false`, "127.0.0.1:43317"},
		{engineServing, `{"time":"t","level":"INFO","msg":"gateway serving","url":"http://127.0.0.1:1"}`, ""},
		{engineServing, `time=t level=INFO msg="models loaded" grpc=127.0.0.1:2`, ""},
		{gatewayServing, `gc 1 @0.01s 2%: 0.1+0.2+0.3 ms clock`, ""},
		// The GC trace's first piece, then the record (seen in a run).
		{gatewayServing, `gc {"time":"t","level":"INFO","msg":"gateway serving","url":"http://127.0.0.1:41203","protocols":"{HTTP1}"}`, "127.0.0.1:41203"},
		// A whole cycle's figures, then the record (seen in a run: the
		// trace's rest, "..., 2 P", came on the next line).
		{engineServing, `gc 3 @0.020s 1%: 0.010+0.50+0.020 ms clock, 0.020+0.10/0.30/0.40+0.040 ms cpu, {"time":"t","level":"INFO","msg":"engine serving","grpc":"127.0.0.1:43317"}`, "127.0.0.1:43317"},
		{engineServing, `4->4->2 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P`, ""},
	} {
		_, line := splitRecord(tc.line)
		out, ok := tc.l.find(line)
		if out != tc.out || ok != (tc.out != "") {
			t.Errorf("%s in %q: %q %v, want %q", tc.l.msg, tc.line, out, ok, tc.out)
		}
	}
}

// A trace line split by a log record still counts its cycle when the
// cycle's figures came before the record.
func TestSplitRecord(t *testing.T) {
	for _, tc := range []struct{ line, trace, record string }{
		{`{"time":"t","msg":"m"}`, "", `{"time":"t","msg":"m"}`},
		{`time=t msg=m`, "", `time=t msg=m`},
		{`gc 1 @0.01s 2%: 0.1+0.2+0.3 ms clock, 0.1+0.2/0.3/0.4+0.5 ms cpu, 4->4->2 MB, 2 P`, `gc 1 @0.01s 2%: 0.1+0.2+0.3 ms clock, 0.1+0.2/0.3/0.4+0.5 ms cpu, 4->4->2 MB, 2 P`, ""},
		{`gc 1 @0.01s 2%: 0.1+0.2+0.3 ms clock, 0.1+0.2/0.3/0.4+0.5 ms cpu, {"time":"t"}`, `gc 1 @0.01s 2%: 0.1+0.2+0.3 ms clock, 0.1+0.2/0.3/0.4+0.5 ms cpu, `, `{"time":"t"}`},
		{`2 P`, "", `2 P`},
	} {
		trace, record := splitRecord(tc.line)
		if trace != tc.trace || record != tc.record {
			t.Errorf("splitRecord(%q) = %q, %q; want %q, %q", tc.line, trace, record, tc.trace, tc.record)
		}
		if tc.trace != "" && !(&gcTrace{}).add(trace, time.Now()) {
			t.Errorf("%q: not a cycle", trace)
		}
	}
}
