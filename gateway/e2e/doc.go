// Package e2e holds end-to-end tests of streamgate with real third-party
// clients and proxies: nginx, configured by the shipped deploy/nginx.conf,
// in front of the gateway, and headless Chromium running a page that uses
// the streaming routes with fetch() and WebSocket as a web app would, and
// driving the playground at / as a person does (TestPlayground; set
// STREAMGATE_SCREENSHOT_DIR to keep its screenshots).
//
// The package has no code outside its tests. The tests skip when nginx or
// chromium is not installed, unless STREAMGATE_REQUIRE_E2E=1 is set (as in
// CI), which makes a missing tool a failure:
//
//	apt-get install -y nginx chromium
//	STREAMGATE_REQUIRE_E2E=1 go test -race ./gateway/e2e/
//
// STREAMGATE_E2E_NGINX_CONF names another nginx configuration to test
// instead of deploy/nginx.conf (same shape: one upstream block, one listen).
package e2e
