package gateway

import (
	"context"
	"net/http"

	"github.com/coder/websocket"
	"github.com/streamgate/streamgate/gateway/ws"
)

// websocket serves GET /v1/ws: the streamgate.v1 protocol, one ws.Session
// per socket, each request run like its HTTP twin.
func (s *Server) websocket(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		s.tritonError(w, r, errDraining)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:       []string{ws.Subprotocol},
		OriginPatterns:     s.opts.WebSocketOriginPatterns,
		InsecureSkipVerify: s.opts.WebSocketSkipOriginCheck,
	})
	if err != nil {
		return // Accept has answered the client
	}
	if c.Subprotocol() != ws.Subprotocol {
		c.Close(websocket.StatusPolicyViolation, "the client must speak "+ws.Subprotocol)
		return
	}
	opts := ws.Options{}
	if s.opts.WebSocket != nil {
		opts = *s.opts.WebSocket
	}
	opts.ErrorInfo = func(err error) (string, string) {
		e := s.logError(r, err)
		return e.Code, e.Msg
	}
	sess := ws.NewSession(c, s.wsRequest, &opts)
	remove, ok := s.streams.add(&liveStream{soft: sess.Drain, hard: sess.Stop})
	if !ok {
		c.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	defer remove()
	sockets := s.metrics.sockets.With()
	sockets.Inc()
	defer sockets.Dec()
	// Run returns once the socket is closed and every request on it ended.
	sess.Run(r.Context())
}

// wsRequest runs one request frame.
func (s *Server) wsRequest(ctx context.Context, req *ws.Request, emit func([]byte) error) error {
	var j *job
	var err error
	switch req.Type {
	case ws.TypeGenerate:
		j, err = s.generateJob(ctx, req.Model, req.Version, req.Body, false)
	case ws.TypeChat:
		j, _, err = s.chatJob(ctx, req.Body)
	case ws.TypeCompletions:
		j, _, err = s.completionJob(ctx, req.Body)
	}
	if err != nil {
		return err
	}
	if te, ok := j.tr.(*textEvents); ok {
		te.stream = true // data frames carry the chunks of the SSE stream
	}
	if s.draining.Load() {
		return errDraining
	}
	release, err := s.limits.acquire("")
	if err != nil {
		s.metrics.rejected.With("global_limit").Inc()
		return err
	}
	defer release()
	c, err := s.start(ctx, j.req)
	if err != nil {
		return err
	}
	defer c.Cancel()
	active := s.metrics.active.With("ws")
	active.Inc()
	defer active.Dec()
	events := s.metrics.events.With("ws")
	err = pump(ctx, c, j.tr, func(p []byte) error {
		if err := emit(p); err != nil {
			return err
		}
		events.Inc()
		return nil
	})
	if err != nil && ctx.Err() != nil {
		err = errClientGone
	}
	s.noteEnd("ws", err)
	return err
}
