package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// delay_ms paces stories260k through /v1 and /v2 as it paces echo, per
// token and per request: while two streams paced at the largest delay
// wait for their first token, an unpaced stream batched with them runs
// from its first token to its end.
func TestTextModelDelayMs(t *testing.T) {
	s := startStack(t)
	if s.textModel() != storiesModel {
		t.Skip("stories260K weights not found: the paced text model is the llama2 engine's")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type paced struct {
		path   string
		events chan sseEvent
		ended  chan error
	}
	var slow []paced
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"stories260k","stream":true,"max_tokens":200,"delay_ms":10000,"messages":[{"role":"user","content":"Once upon a time"}]}`},
		{"/v2/models/stories260k/generate_stream", `{"text_input":"Once upon a time","stream":true,"parameters":{"delay_ms":10000},"sampling_parameters":"{\"max_tokens\":200}"}`},
	} {
		p := paced{c.path, make(chan sseEvent, 256), make(chan error, 1)}
		// The answer's headers wait for its first token: post from
		// the reading goroutine.
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				p.ended <- err
				return
			}
			defer resp.Body.Close()
			r := newSSEReader(resp.Body)
			for {
				ev, err := r.next()
				if err != nil {
					p.ended <- err
					return
				}
				p.events <- ev
			}
		}()
		slow = append(slow, p)
	}
	// Both paced requests run in the engine, whose scheduler batches
	// them with the next one.
	waitFor(t, "both paced streams to reach the engine", func() bool { return s.eng.InFlight() == 2 })

	resp := s.startStream(t, ctx, "/v1/completions", `{"model":"stories260k","stream":true,"max_tokens":16,"temperature":0,"prompt":"Once upon a time"}`)
	var chunks int
	r := newSSEReader(resp.Body)
	for {
		ev, err := r.next()
		if err != nil {
			t.Fatalf("unpaced stream: %v after %d chunks", err, chunks)
		}
		if ev.Data == "[DONE]" {
			break
		}
		if strings.Contains(ev.Data, `"text":"`) && !strings.Contains(ev.Data, `"text":""`) {
			chunks++
		}
	}
	resp.Body.Close()
	if chunks < 8 {
		t.Errorf("unpaced stream: %d text chunks, want one per token", chunks)
	}

	for _, p := range slow {
		for len(p.events) > 0 {
			if ev := <-p.events; tokenIn(ev.Data) {
				t.Errorf("%s paced at 10 s a token sent a token before the unpaced stream ended: %s", p.path, ev.Data)
			}
		}
	}
	cancel()
	for _, p := range slow {
		if err := <-p.ended; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
			t.Logf("%s: %v", p.path, err)
		}
	}
	waitFor(t, "the paced requests to end in the engine", func() bool { return s.eng.InFlight() == 0 })
}

// tokenIn reports whether an event's data carries generated text: a /v1
// chat chunk's content or a /v2 response's text_output, not empty.
func tokenIn(data string) bool {
	for _, k := range []string{`"content":"`, `"text_output":"`} {
		if i := strings.Index(data, k); i >= 0 && !strings.HasPrefix(data[i+len(k):], `"`) {
			return true
		}
	}
	return false
}
