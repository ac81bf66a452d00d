package bench

import "testing"

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
	} {
		out, ok := tc.l.find(tc.line)
		if out != tc.out || ok != (tc.out != "") {
			t.Errorf("%s in %q: %q %v, want %q", tc.l.msg, tc.line, out, ok, tc.out)
		}
	}
}
