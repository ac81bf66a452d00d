// Package check tests what deploy/ ships against the things it describes:
// the Helm chart and deploy/k8s decode strictly into Kubernetes' own API
// types and run flags, probes, ports and variables that streamgate really
// has; the alert rules pass promtool's unit tests; every metric the
// dashboard and the alerts query is one `streamgate serve` exposes.
//
// It is a module of its own so that k8s.io/* and Prometheus' PromQL parser
// stay out of the product's go.mod; .ci/run runs it with
//
//	(cd deploy/check && go test -race ./...)
package check
