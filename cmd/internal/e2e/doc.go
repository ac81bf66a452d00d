// Package e2e holds streamgate's black-box tests against a whole stack:
// engine, upstream client and gateway, wired by cmd/internal/stack as
// `streamgate serve` wires them, over loopback gRPC and HTTP. Start with
// newStack (stack_test.go).
//
// Besides Go clients they use real third-party clients and proxies: the
// official openai npm package, the Vercel AI SDK and LangChain JS
// (node_test.go), nginx configured by the
// shipped deploy/nginx.conf in front of the gateway, and headless Chromium
// running a page that uses the streaming routes with fetch() and
// WebSocket as a web app would, and driving the playground at / as a
// person does (TestPlayground; set STREAMGATE_SCREENSHOT_DIR to keep its
// screenshots). openapi_test.go keeps openapi.yaml true:
// every route is documented, and every response the tests read is checked
// against it.
//
// faults_test.go is the fault-injection suite: `streamgate engine` and
// `streamgate gateway` built and run as processes, the engine stopped
// (SIGSTOP) and resumed under SSE, WebSocket and unary load, a request
// that would wedge a model, a 1 MB prompt (the engine's CPU time read from
// /proc), and clients trickling their bodies; clientfaults_test.go checks
// that each fault of a client is counted as the client's.
//
// TLS tests (tls_test.go, browser_tls_test.go, nginx_tls_test.go) make
// their certificates with tlsfiles/tlstest: every route over HTTP/2,
// rotation, mutual TLS on both sides, h2c, Chromium's twelve streams on
// one HTTP/2 connection against six on HTTP/1.1, and
// deploy/nginx-tls.conf terminating and passing TLS through.
//
// The package has no code outside its tests. The tests that need a tool
// skip when it is not installed, unless STREAMGATE_REQUIRE=1 (nginx
// and its stream module, chromium, openssl, curl) or
// STREAMGATE_REQUIRE=1 (node and the npm package) is set, as in CI,
// which makes a missing tool a failure:
//
//	apt-get install -y nginx libnginx-mod-stream chromium nodejs npm openssl curl
//	(cd cmd/internal/e2e/node && npm ci)
//	STREAMGATE_REQUIRE=1 go test -race ./cmd/internal/e2e/
//
// STREAMGATE_E2E_NGINX_CONF names another nginx configuration to test
// instead of deploy/nginx.conf (same shape: one upstream block, one listen).
//
// The interop tests (interop_test.go) run the gateway against a Triton
// stand-in on grpc core (cmd/internal/coretriton: python3-grpcio,
// python3-protobuf, protobuf-compiler, protobuf-compiler-grpc;
// STREAMGATE_REQUIRE=1 makes them required). tritonclient_test.go
// runs NVIDIA's tritonclient and Triton's QA tests from the folder
// STREAMGATE_TRITONCLIENT_DIR names (the client's source, Triton's QA
// tests and a setup script on Debian packages; CI sets it, and
// STREAMGATE_REQUIRE=1 makes it required). Users install
// tritonclient from PyPI.
package e2e
