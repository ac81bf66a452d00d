package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFloorSmoke runs sse and ws against spawned gateways and, beside
// each, against the floor server (a streamgate binary built for the
// test, paced by the bench): every run ends its requests without errors,
// the floor's CPU, system calls and switches are counted, and each
// gateway run is set against its floor. With --cancel-after, clients
// leave mid-stream (SSE drops the connection, WS sends a cancel frame)
// and the floor server answers as the gateway does; its pacer sends each
// response when due (--floor-tick 0).
func TestFloorSmoke(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "streamgate")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/streamgate/streamgate/cmd/streamgate").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// A count of requests, not a short window, which a saturated machine
	// may close before a request ends; the 10m window is a hang guard.
	run := func(t *testing.T, extra ...string) Report {
		args := append([]string{"--floor", "--json", "--transport", "sse,ws", "--c", "3", "--responses", "5", "--delay", "5ms",
			"--requests", "6", "--duration", "10m", "--warmup", "0s", "--pause", "0s"}, extra...)
		c, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		c.FloorBinary = bin
		var out, errOut bytes.Buffer
		if err := runBench(context.Background(), c, &out, &errOut); err != nil {
			t.Fatalf("bench: %v\n%s", err, errOut.String())
		}
		var rep Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range rep.Results {
			names = append(names, r.Transport)
			if r.Responses == 0 || len(r.Errors) != 0 {
				t.Errorf("%s: %d responses, errors %v", r.Transport, r.Responses, r.ErrorSamples)
			}
		}
		if got := strings.Join(names, " "); got != "sse sse-floor ws ws-floor" {
			t.Fatalf("runs %q", got)
		}
		return rep
	}
	t.Run("to the end", func(t *testing.T) {
		rep := run(t, "--spawn", "--spawn-split", "--spawn-binary", bin)
		for _, r := range rep.Results {
			if !r.Floor {
				// CPU is counted in clock ticks: a run this short may
				// read 0.
				if o := r.OverFloor; o == nil || o.Of != "gateway" || o.AddedUS != o.CPUPerResponse-o.FloorCPUPerResponse {
					t.Errorf("%s: over the floor %+v", r.Transport, o)
				}
				continue
			}
			// Each request completed in the window had its responses
			// written to its client: at least one write each (the last
			// response and the end go together), and one upstream write
			// asking for it.
			c := r.ServerCalls
			if r.ServerCPU == nil || c == nil || c.Reads <= 0 || c.Writes < 2*(r.Requests-int64(r.Concurrency)) {
				t.Errorf("%s: cpu %v, calls %+v for %d requests", r.Transport, r.ServerCPU, c, r.Requests)
			}
		}
	})
	t.Run("cancel", func(t *testing.T) {
		rep := run(t, "--embedded", "--cancel-after", "2", "--floor-tick", "0")
		for _, r := range rep.Results {
			if r.Cancelled == 0 {
				t.Errorf("%s: no request left mid-stream", r.Transport)
			}
		}
	})
}

// A client frame is unmasked and measured in every length form, and
// stays unparsed until it has arrived whole.
func TestParseClientFrame(t *testing.T) {
	mask := []byte{1, 2, 3, 4}
	for _, size := range []int{0, 5, 125, 126, 300, 70000} {
		payload := bytes.Repeat([]byte("x"), size)
		frame := []byte{0x81}
		switch {
		case size < 126:
			frame = append(frame, 0x80|byte(size))
		case size < 1<<16:
			frame = append(frame, 0x80|126, byte(size>>8), byte(size))
		default:
			frame = append(frame, 0x80|127, 0, 0, 0, 0, 0, byte(size>>16), byte(size>>8), byte(size))
		}
		frame = append(frame, mask...)
		for i, b := range payload {
			frame = append(frame, b^mask[i&3])
		}
		frame = append(frame, 0x88, 0x80, 0, 0, 0, 0) // a close frame after it
		if _, _, _, ok := parseClientFrame(frame[:len(frame)-7]); ok {
			t.Errorf("%d bytes: parsed before it was whole", size)
		}
		op, p, n, ok := parseClientFrame(frame)
		if !ok || op != 1 || !bytes.Equal(p, payload) || n != len(frame)-6 {
			t.Errorf("%d bytes: op %d, %d bytes, n %d, ok %v", size, op, len(p), n, ok)
		}
		if op, _, _, ok := parseClientFrame(frame[n:]); !ok || op != 8 {
			t.Errorf("%d bytes: the close frame after it: op %d, ok %v", size, op, ok)
		}
	}
	if id := frameID([]byte(`{"body":{"IN":[1]},"id":"r12","model":"m","type":"generate"}`)); id != "r12" {
		t.Errorf("id %q", id)
	}
}
