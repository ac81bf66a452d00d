package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// The process's log: JSON by default, with the trace of the request on
// the lines a request writes; text with --log-format text; only what
// --log-level (or its variable) lets through.
func TestLogFormats(t *testing.T) {
	bin := buildBinary(t)
	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		name  string
		args  []string
		env   []string
		check func(t *testing.T, lines []string)
	}{
		{"json, debug", []string{"--log-level", "debug"}, nil, func(t *testing.T, lines []string) {
			var request, notFound, stopped bool
			for _, line := range lines {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil {
					t.Errorf("not a JSON log record: %q (%v)", line, err)
					continue
				}
				switch rec["msg"] {
				case "request":
					switch rec["path"] {
					case "/v2/models/repeat_int32/generate_stream":
						request = true
						if rec["level"] != "INFO" || rec["trace_id"] != traceID || rec["span_id"] != spanID {
							t.Errorf("the request's line does not name the caller's trace: %s", line)
						}
						if rec["status"] != 200.0 || rec["model"] != "repeat_int32" {
							t.Errorf("the request's line lacks its status or model: %s", line)
						}
						if d, ok := rec["duration"].(string); !ok || !strings.HasSuffix(d, "s") {
							t.Errorf("the request's duration is not Go's duration text: %s", line)
						}
					case "/v1/chat/completions":
						notFound = rec["level"] == "INFO" && rec["status"] == 404.0
					}
				case "shutting down":
					if rec["grace"] != "10s" {
						t.Errorf("grace is not Go's duration text: %s", line)
					}
				case "gateway serving":
					if rec["protocols"] != "HTTP/1.1" || rec["cancel"] != "auto" {
						t.Errorf("protocols or cancel not in words: %s", line)
					}
				case "stopped":
					stopped = true
				}
			}
			if !request || !notFound || !stopped {
				t.Errorf("request line %v, 404 line %v, stopped line %v", request, notFound, stopped)
			}
		}},
		{"text", []string{"--log-format", "text"}, nil, func(t *testing.T, lines []string) {
			var stopped bool
			for _, line := range lines {
				if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=") || !strings.Contains(line, " msg=") {
					t.Errorf("not a text log line: %q", line)
				}
				if strings.Contains(line, "level=DEBUG") {
					t.Errorf("a debug line at the default level: %q", line)
				}
				stopped = stopped || strings.HasSuffix(line, " level=INFO msg=stopped")
			}
			if !stopped {
				t.Error("no stopped line")
			}
		}},
		{"json, warn from the environment", nil, []string{"STREAMGATE_LOG_LEVEL=warn"}, func(t *testing.T, lines []string) {
			for _, line := range lines {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["level"] != "WARN" && rec["level"] != "ERROR" {
					t.Errorf("below warn or not JSON: %q", line)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			httpAddr := freeAddr(t)
			args := append([]string{"serve", "--http", httpAddr, "--grpc", freeAddr(t)}, tc.args...)
			cmd, logs := startEnv(t, append([]string{"STREAMGATE_MODEL_DIR=" + t.TempDir()}, tc.env...), bin, args...)
			base := "http://" + httpAddr
			waitHTTP(t, base+"/readyz")
			req, err := http.NewRequest("POST", base+"/v2/models/repeat_int32/generate_stream", strings.NewReader(`{"IN":[1],"DELAY":[0],"WAIT":0}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("traceparent", "00-"+traceID+"-"+spanID+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			resp, err = http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"nope","messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitExit(t, cmd, logs)
			var lines []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if line != "" {
					lines = append(lines, line)
				}
			}
			tc.check(t, lines)
			if t.Failed() {
				t.Logf("log:\n%s", logs.String())
			}
		})
	}
}
