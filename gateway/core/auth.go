package core

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
)

// API keys and their limits (DESIGN.md, "Scale-out"). With Options.Keys
// set, every API route needs a key: handle authenticates HTTP requests
// before their handler runs, websocket authenticates the upgrade and
// answers a bad key with an error frame. A keyed request's context
// carries its key (keyOf), and WithLimitKey names it for the per-client
// limit and as the owner of what it creates (callerKey).
//
// Limits are the store's, shared by replicas: handle counts every keyed
// HTTP request against the key's requests per minute; serve reserves an
// inference request's tokens and a concurrency slot (and counts a
// WebSocket request), and settles the tokens from the model's usage when
// it ends. Every answer to a keyed HTTP request carries OpenAI's
// x-ratelimit-* headers.
//
// A WebSocket is authenticated when it opens, and each of its requests
// looks its key up again (recheck): revoking a key ends its use on open
// sockets too.
//
// The store unreachable (Redis down): keyed requests fail closed with 503
// (no key is served from memory); requests already running go on, and
// what they fail to settle is logged and counted.

// keyed is what the context of a keyed request carries.
type keyed struct {
	key store.Key
	// Header is the answer's, for the x-ratelimit-* headers; nil on a
	// WebSocket request.
	header http.Header
	// counted: the request was counted against RPM (HTTP, by handle).
	counted bool
}

type keyedCtx struct{}

// keyOf is the key of a keyed request, nil on an open gateway.
func keyOf(ctx context.Context) *keyed {
	k, _ := ctx.Value(keyedCtx{}).(*keyed)
	return k
}

func withKey(ctx context.Context, k *keyed) context.Context {
	return WithLimitKey(context.WithValue(ctx, keyedCtx{}, k), k.key.ID)
}

var (
	errNoKey = &HTTPError{Status: http.StatusUnauthorized, Code: "invalid_api_key",
		Msg: "You didn't provide an API key: send it as 'Authorization: Bearer KEY' (on /v1/ws also as the subprotocol streamgate.key.KEY)"}
	errBadKey = &HTTPError{Status: http.StatusUnauthorized, Code: "invalid_api_key",
		Msg: "Incorrect API key provided"}
	errKeyExpired = &HTTPError{Status: http.StatusUnauthorized, Code: "invalid_api_key",
		Msg: "The API key has expired"}
)

// errStore answers a request the shared store could not serve: the one
// answer for the store down, whatever found it (classify gives it to
// every store.ErrUnavailable).
func errStore(err error) *HTTPError {
	return &HTTPError{Status: http.StatusServiceUnavailable, Code: "unavailable",
		Msg: "the gateway's shared store is unavailable; try again shortly", RetryAfter: true, Err: err}
}

// BearerKey is the key of an Authorization header: "Bearer KEY" (the
// scheme in any case, one or more spaces). ok is false when there is no
// such key.
func BearerKey(h string) (key string, ok bool) {
	scheme, rest, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimLeft(rest, " ")
	if !validKey(key) {
		return "", false
	}
	return key, true
}

// validKey reports whether a key as sent could be one: visible ASCII
// without ',', '"' or '\\' (a token of Sec-WebSocket-Protocol, or
// OAuth's b64token).
func validKey(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f || c == ',' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// keyProtocol prefixes the WebSocket subprotocol that carries a key.
const keyProtocol = "streamgate.key."

// subprotocolKey is the key offered as a subprotocol streamgate.key.KEY
// in Sec-WebSocket-Protocol values (each a comma-separated list). ok is
// false when none is offered.
func subprotocolKey(values []string) (key string, ok bool) {
	for _, v := range values {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			if k, found := strings.CutPrefix(p, keyProtocol); found && validKey(k) {
				return k, true
			}
		}
	}
	return "", false
}

// Authenticate finds the key of r (Authorization, or on WebSocket
// upgrades also the subprotocol) and returns r's context with it.
func (s *Server) Authenticate(r *http.Request, webSocket bool) (context.Context, *keyed, error) {
	secret, ok := BearerKey(r.Header.Get("Authorization"))
	if !ok && webSocket {
		secret, ok = subprotocolKey(r.Header.Values("Sec-WebSocket-Protocol"))
	}
	if !ok {
		return nil, nil, errNoKey
	}
	k, err := s.Opts.Keys.LookupKey(r.Context(), store.HashSecret(secret))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil, errBadKey
	case err != nil:
		s.StoreError(r.Context(), "keys", err)
		return nil, nil, errStore(err)
	case k.Expired(time.Now()):
		return nil, nil, errKeyExpired
	}
	kd := &keyed{key: k}
	return withKey(r.Context(), kd), kd, nil
}

// recheck looks k up again, for a request on a socket authenticated
// earlier: a revoked or expired key fails as at the door.
func (s *Server) recheck(ctx context.Context, k store.Key) (store.Key, error) {
	fresh, err := s.Opts.Keys.LookupKey(ctx, k.Hash)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && fresh.ID != k.ID:
		return store.Key{}, errBadKey
	case err != nil:
		s.StoreError(ctx, "keys", err)
		return store.Key{}, errStore(err)
	case fresh.Expired(time.Now()):
		return store.Key{}, errKeyExpired
	}
	return fresh, nil
}

// door authenticates an HTTP request to an API route and counts it
// against its key's requests per minute; it returns the request to serve.
func (s *Server) door(w http.ResponseWriter, r *http.Request) (*http.Request, error) {
	ctx, kd, err := s.Authenticate(r, false)
	if err != nil {
		return nil, err
	}
	kd.header, kd.counted = w.Header(), true
	if err := s.takeLimits(ctx, kd, store.Take{Requests: 1}, nil); err != nil {
		return nil, err
	}
	return r.WithContext(ctx), nil
}

// takeLimits takes t from kd's limits, sets the x-ratelimit-* headers of
// an HTTP answer, and returns the 429 or 503 to answer when it cannot.
func (s *Server) takeLimits(ctx context.Context, kd *keyed, t store.Take, v *store.Verdict) error {
	l := kd.key.Limit
	if l == (store.Limit{}) {
		if v != nil {
			v.Reserved = t.Tokens
		}
		return nil
	}
	got, err := s.Opts.Store.Admit(ctx, kd.key.ID, l, t)
	if err != nil {
		s.StoreError(ctx, "limits", err)
		return errStore(err)
	}
	if v != nil {
		*v = got
	}
	if kd.header != nil {
		setRateHeaders(kd.header, got)
	}
	if got.Limited == "" {
		return nil
	}
	s.metrics.rateLimited.With(got.Limited).Inc()
	e := &HTTPError{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", RetryIn: max(got.RetryAfter, time.Millisecond)}
	wait := retrySeconds(e.RetryIn)
	switch got.Limited {
	case store.LimitRequests:
		e.Msg = fmt.Sprintf("Rate limit reached for requests per minute (RPM): limit %d. Please try again in %ds.", l.RPM, wait)
	case store.LimitTokens:
		e.Msg = fmt.Sprintf("Rate limit reached for tokens per minute (TPM): limit %d, requested %d. Please try again in %ds.", l.TPM, min(t.Tokens, l.TPM), wait)
	default:
		e.Msg = fmt.Sprintf("Too many requests in flight for this API key: limit %d.", l.Concurrency)
	}
	return e
}

// setRateHeaders sets OpenAI's x-ratelimit-* headers from v, for the
// limits the key has.
func setRateHeaders(h http.Header, v store.Verdict) {
	set := func(kind string, w store.Window) {
		if w.Limit == 0 {
			return
		}
		h.Set("X-Ratelimit-Limit-"+kind, strconv.Itoa(w.Limit))
		h.Set("X-Ratelimit-Remaining-"+kind, strconv.Itoa(w.Remaining))
		h.Set("X-Ratelimit-Reset-"+kind, resetText(w.Reset))
	}
	set("Requests", v.Requests)
	set("Tokens", v.Tokens)
}

// resetText writes a reset time as OpenAI does: "20ms", "1s", "6m0s".
func resetText(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// retrySeconds is d in whole seconds, rounded up, at least 1.
func retrySeconds(d time.Duration) int {
	return max(int((d+time.Second-1)/time.Second), 1)
}

// defaultReserve is the completion tokens reserved for a request that
// sets no max_tokens; the model's usage settles it.
const defaultReserve = 256

// PromptTokens estimates a prompt's tokens: about four bytes a token.
func PromptTokens(prompt string) int { return len(prompt)/4 + 1 }

// EstimateTokens is what a text request reserves: its prompt's estimate
// plus max_tokens (or defaultReserve).
func EstimateTokens(prompt string, maxTokens *int) int {
	n := PromptTokens(prompt)
	if maxTokens != nil && *maxTokens > 0 {
		return n + *maxTokens
	}
	return n + defaultReserve
}

// admitKeyed admits an inference request of the keyed request kd: its
// model allowed, a concurrency slot and its tokens taken. done settles it
// with the translator's usage.
func (s *Server) admitKeyed(ctx context.Context, kd *keyed, j *Job) (done func(), err error) {
	kd, slot, v, err := s.takeKeyed(ctx, kd, j.Req.GetModelName(), j.Tokens)
	if err != nil {
		return nil, err
	}
	l := kd.key.Limit
	if l.TPM == 0 && l.Concurrency == 0 {
		return func() {}, nil
	}
	return func() {
		used := v.Reserved
		if u, ok := j.Tr.(UsageReporter); ok {
			_, in, out := u.Outcome()
			if in < 0 {
				in = j.Prompt
			}
			used = max(in, 0) + max(out, 0)
		}
		if used == v.Reserved && l.Concurrency == 0 {
			return // nothing to give back or correct
		}
		s.settle(ctx, kd, slot, used-v.Reserved)
	}, nil
}

// AdmitFrame admits a WebSocket frame that reads what a request made (a
// resume): the socket's key looked up again, a request and a concurrency
// slot taken, as for a new request. done gives the slot back. An open
// gateway admits every frame.
func (s *Server) AdmitFrame(ctx context.Context) (done func(), err error) {
	kd := keyOf(ctx)
	if kd == nil {
		return func() {}, nil
	}
	kd, slot, _, err := s.takeKeyed(ctx, kd, "", 0)
	if err != nil {
		return nil, err
	}
	if kd.key.Limit.Concurrency == 0 {
		return func() {}, nil
	}
	return func() { s.settle(ctx, kd, slot, 0) }, nil
}

// takeKeyed takes tokens, a concurrency slot (named slot) and, on a
// WebSocket, a request from the keyed request kd's limits, after checking
// that the key may use model ("": none named). A WebSocket's key is looked
// up again first: the key may have been revoked, expired or changed since
// its socket opened. kd is the key as admitted.
func (s *Server) takeKeyed(ctx context.Context, kd *keyed, model string, tokens int) (_ *keyed, slot string, v store.Verdict, err error) {
	if !kd.counted {
		k, err := s.recheck(ctx, kd.key)
		if err != nil {
			return nil, "", v, err
		}
		kd = &keyed{key: k}
	}
	if model != "" && !kd.key.Allows(model) {
		return nil, "", v, modelNotAllowed(model)
	}
	slot = s.IDs.Next("slot")
	t := store.Take{Tokens: tokens, Slot: slot}
	if !kd.counted {
		t.Requests = 1
	}
	if err := s.takeLimits(ctx, kd, t, &v); err != nil {
		return nil, "", v, err
	}
	return kd, slot, v, nil
}

// settle gives back a keyed request's slot and corrects its tokens by
// tokens (used minus reserved). The request's own context may be done
// (its client left): the settlement still runs, briefly.
func (s *Server) settle(ctx context.Context, kd *keyed, slot string, tokens int) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := s.Opts.Store.Settle(sctx, kd.key.ID, kd.key.Limit, slot, tokens); err != nil {
		s.StoreError(ctx, "limits", err)
	}
}

// settleTimeout bounds settling a request's limits when it ends.
const settleTimeout = 2 * time.Second

// modelNotAllowed is OpenAI's answer for a model a key may not use: 404,
// as for a model that does not exist.
func modelNotAllowed(model string) *HTTPError {
	return &HTTPError{Status: http.StatusNotFound, Code: "model_not_found", Param: "model",
		Msg: "The model '" + model + "' does not exist or you do not have access to it"}
}

// ModelAllowed is nil when the request with context ctx may use model.
func ModelAllowed(ctx context.Context, model string) error {
	if kd := keyOf(ctx); kd != nil && !kd.key.Allows(model) {
		return modelNotAllowed(model)
	}
	return nil
}

// TritonModelAllowed is modelAllowed on the Triton routes: a model the
// key may not use is answered as Triton answers a model it does not have,
// so that a key learns nothing of the others.
func TritonModelAllowed(ctx context.Context, model string) error {
	if kd := keyOf(ctx); kd != nil && !kd.key.Allows(model) {
		return &HTTPError{Status: http.StatusNotFound, Code: "model_not_found",
			Msg: "Request for unknown model: '" + model + "' is not found"}
	}
	return nil
}

// AllowsAll reports whether the request with context ctx may use every
// model (an open gateway, or a key without --models).
func AllowsAll(ctx context.Context) bool {
	kd := keyOf(ctx)
	return kd == nil || len(kd.key.Models) == 0
}

// StoreError counts and logs a failure of the shared store.
func (s *Server) StoreError(ctx context.Context, op string, err error) {
	s.metrics.StoreErrs.With(op).Inc()
	s.Log.WarnContext(ctx, "store failed", "op", op, "err", err)
}

// StorageBudget is the bytes of stored responses the caller of ctx may
// keep: its key's own budget, else Options.KeyStorage; 0 on an open
// gateway, where only the cap applies.
func (s *Server) StorageBudget(ctx context.Context) int64 {
	kd := keyOf(ctx)
	switch {
	case kd == nil:
		return 0
	case kd.key.Storage > 0:
		return kd.key.Storage
	}
	return s.Opts.KeyStorage
}
