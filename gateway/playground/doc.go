// Package playground serves streamgate's browser playground at GET /: one
// HTML page, embedded in the binary, that talks to the gateway's own
// routes from the same origin. It picks a model (from /v1/models, its
// inputs from /v2/models/{model}) and a route (OpenAI chat or completion,
// Triton generate_stream), streams answers over fetch (SSE), EventSource
// on a resumable stream (shown only once the server offers them) or the
// streamgate.v1 WebSocket, several at once side by side, with live
// figures (time to first token, tokens/s, the gaps between tokens), the
// raw events, Stop and "drop connection".
//
// Start with Handler. The page is plain HTML, CSS and JavaScript in page/
// with no build step and nothing fetched from elsewhere: index.html holds
// the markup, style.css the look (light and dark), and the scripts, in
// the order Handler joins them into one module, are sse.js (reading event
// streams), figures.js (the figures and the gap chart), transports.js
// (fetch, EventSource, WebSocket), run.js (one request and its card) and
// app.js (the page's state, the composer, init).
// Handler inlines them into one document whose Content-Security-Policy
// allows exactly those inline blocks and connections to the page's own
// origin.
//
// The tests that drive the page in headless Chromium are in cmd/internal/e2e.
package playground
