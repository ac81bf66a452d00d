package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/store"
)

// A stored response belongs to the API key that created it: any other
// key, or none, gets 404 from every route that reads, continues, cancels
// or deletes it, as for an id that does not exist.
func TestStoredResponseOwner(t *testing.T) {
	srv := fakeServer()
	h := srv.Handler()
	do := func(method, path, key, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if key != "" {
			req = req.WithContext(core.WithLimitKey(req.Context(), key))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	code, body := do(http.MethodPost, "/v1/responses", "k1", `{"model":"echo","input":"x"}`)
	var created struct{ ID string }
	if code != 200 || json.Unmarshal([]byte(body), &created) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	rec, err := srv.core.Opts.Store.GetResponse(t.Context(), created.ID)
	if err != nil || rec.Owner != "k1" {
		t.Fatalf("stored %+v %v", rec, err)
	}

	bg := openai.NewResponse("resp-bg", 1, &openai.ResponsesRequest{Model: "echo", Background: true, Store: true})
	bg.Status = openai.StatusCompleted
	if err := srv.core.Opts.Store.PutResponse(t.Context(), "resp-bg", store.StoredResponse{Owner: "k1", Object: bg.JSON(), Data: []byte(`{"input":[]}`)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{created.ID, "resp-bg"} {
		routes := []struct{ method, path, body string }{
			{http.MethodGet, "/v1/responses/" + id, ""},
			{http.MethodGet, "/v1/responses/" + id + "/input_items", ""},
			{http.MethodPost, "/v1/responses", `{"model":"echo","input":"y","previous_response_id":"` + id + `"}`},
		}
		if id == "resp-bg" {
			routes = append(routes, struct{ method, path, body string }{http.MethodPost, "/v1/responses/" + id + "/cancel", ""})
		}
		routes = append(routes, struct{ method, path, body string }{http.MethodDelete, "/v1/responses/" + id, ""})
		for _, rt := range routes {
			for _, key := range []string{"", "k2"} {
				if code, body := do(rt.method, rt.path, key, rt.body); code != 404 || !strings.Contains(body, "not found") {
					t.Errorf("%s %s with key %q: %d %s, want 404", rt.method, rt.path, key, code, body)
				}
			}
			if code, body := do(rt.method, rt.path, "k1", rt.body); code != 200 {
				t.Errorf("%s %s with its key: %d %s", rt.method, rt.path, code, body)
			}
		}
	}
}

// GET /v1/responses/{id}/input_items pages as asked (order, after,
// limit), and a bad value of any of them is a 400 that names it, never
// ignored.
func TestResponseInputItemsPages(t *testing.T) {
	srv := fakeServer()
	h := srv.Handler()
	get := func(query string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "/v1/responses/resp-x/input_items"+query, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	obj := openai.NewResponse("resp-x", 1, &openai.ResponsesRequest{Model: "echo", Store: true})
	obj.Status = openai.StatusCompleted
	data := `{"input":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`
	if err := srv.core.Opts.Store.PutResponse(t.Context(), "resp-x", store.StoredResponse{Object: obj.JSON(), Data: []byte(data)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	ids := func(body string) string {
		var l struct {
			Data    []struct{ ID string }
			HasMore bool `json:"has_more"`
		}
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		var out []string
		for _, d := range l.Data {
			out = append(out, strings.TrimPrefix(d.ID, "msg-x-"))
		}
		return strings.Join(out, ",") + map[bool]string{true: " more"}[l.HasMore]
	}
	for query, want := range map[string]string{
		"":                                  "0,1,2",
		"?order=asc":                        "0,1,2",
		"?order=desc":                       "2,1,0",
		"?limit=2":                          "0,1 more",
		"?limit=2&after=msg-x-1":            "2",
		"?order=desc&limit=1&after=msg-x-2": "1 more",
	} {
		if code, body := get(query); code != 200 || ids(body) != want {
			t.Errorf("%q: %d %s, want %s", query, code, body, want)
		}
	}
	for query, param := range map[string]string{
		"?limit=0": "limit", "?limit=101": "limit", "?limit=-1": "limit", "?limit=abc": "limit",
		"?order=sideways": "order", "?after=nope": "after",
	} {
		if code, body := get(query); code != 400 || !strings.Contains(body, `"param":"`+param+`"`) {
			t.Errorf("%q: %d %s, want 400 naming %s", query, code, body, param)
		}
	}
}

// A chain of responses cannot grow without bound: a previous_response_id
// whose conversation, with the new input, holds more text than a request
// body may is a 400 naming previous_response_id, not a conversation
// that doubles at each turn of a model that repeats it.
func TestResponseChainBounded(t *testing.T) {
	srv := testServer(fakeClient, fakeUpstream{}, &Options{MaxBodyBytes: 4096, Store: store.NewMemory()})
	h := srv.Handler()
	obj := openai.NewResponse("resp-big", 1, &openai.ResponsesRequest{Model: "echo", Store: true})
	obj.Status = openai.StatusCompleted
	data, _ := json.Marshal(map[string][]openai.ChatMessage{"input": {{Role: "user", Content: strings.Repeat("a", 4000)}},
		"history": {{Role: "user", Content: strings.Repeat("b", 1000)}}}) // the stored data's JSON
	if err := srv.core.Opts.Store.PutResponse(t.Context(), "resp-big", store.StoredResponse{Object: obj.JSON(), Data: data}, time.Minute); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(`{"model":"echo","input":"more text","previous_response_id":"resp-big"}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), `"param":"previous_response_id"`) || !strings.Contains(rec.Body.String(), `"code":"context_length_exceeded"`) {
		t.Errorf("continuing a conversation beyond the body limit: %d %s", rec.Code, rec.Body.String())
	}
}
