package check

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// ruleFile is the part of a Prometheus rule file the checks read.
type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// The alert rules pass `promtool check rules`, their unit tests pass
// `promtool test rules`, and every alert has a test in which it fires.
func TestAlertRules(t *testing.T) {
	promtool := requireTool(t, "promtool", "", "PROMETHEUS", "apt-get install -y prometheus")
	dir := filepath.Join(root, "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var rules ruleFile
	readYAML(t, filepath.Join(dir, "alerts.yaml"), &rules)
	var tests struct {
		RuleFiles          []string `json:"rule_files"`
		EvaluationInterval string   `json:"evaluation_interval"`
		Tests              []struct {
			Interval      string            `json:"interval"`
			InputSeries   []json.RawMessage `json:"input_series"`
			AlertRuleTest []struct {
				EvalTime  string            `json:"eval_time"`
				Alertname string            `json:"alertname"`
				ExpAlerts []json.RawMessage `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	readYAML(t, filepath.Join(dir, "alerts_test.yaml"), &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: alerts_test.yaml needs a case where it fires and one where it does not (fires %v, quiet %v)", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	// What the operator's kit promises (deploy/README.md).
	for _, want := range []string{"StreamgateUpstreamTargetDown", "StreamgateHighErrorRatio", "StreamgateTTFTHigh",
		"StreamgateQueueOverflows", "StreamgateRedisStoreErrors", "StreamgateDrainStuck"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yaml has no %s", want)
		}
	}
}

// query is one PromQL expression deploy/ ships, and where it is.
type query struct{ where, expr string }

// grafanaVar is a dashboard variable in a query: $name or ${name}.
var grafanaVar = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// labelValues is Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)

// dashboardQueries walks the dashboard's JSON for panel targets' expr and
// the variables' label_values queries.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "streamgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels     []map[string]any `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("deploy/grafana/streamgate.json: %v", err)
	}
	var out []query
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			pm, _ := p.(map[string]any)
			title, _ := pm["title"].(string)
			if pm["type"] != "row" && pm["type"] != "text" {
				targets, _ := pm["targets"].([]any)
				if len(targets) == 0 {
					t.Errorf("panel %q has no query", title)
				}
				for _, tg := range targets {
					expr, _ := tg.(map[string]any)["expr"].(string)
					if expr == "" {
						t.Errorf("panel %q: a target with no expr", title)
					}
					out = append(out, query{"dashboard panel " + strconvQuote(title), expr})
				}
			}
			sub, _ := pm["panels"].([]any)
			walk(sub)
		}
	}
	var panels []any
	for _, p := range dash.Panels {
		panels = append(panels, p)
	}
	walk(panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, s)
			continue
		}
		out = append(out, query{"dashboard variable " + v.Name + " (label " + m[2] + ")", fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
	}
	if len(out) < 20 {
		t.Fatalf("dashboard: only %d queries", len(out))
	}
	return out
}

func strconvQuote(s string) string { return `"` + s + `"` }

// selectorUse is a metric a query selects, and the labels it matches or
// groups by on it.
type selectorUse struct {
	where, metric string
	labels        []string
}

// targetLabels are attached by the scrape, not by streamgate.
var targetLabels = []string{"job", "instance", "namespace", "pod", "container", "service", "endpoint"}

// selectors parses q (Grafana variables replaced: intervals by 5m, the
// others by a value) and returns the metrics it selects with the labels
// used on each: matchers, and by()/without() of aggregations over them.
func selectors(t *testing.T, q query) []selectorUse {
	t.Helper()
	expr := grafanaVar.ReplaceAllStringFunc(q.expr, func(v string) string {
		if strings.Contains(v, "__") {
			return "5m"
		}
		return "x"
	})
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", q.where, q.expr, err)
		return nil
	}
	var out []selectorUse
	parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		use := selectorUse{where: q.where, metric: vs.Name}
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName {
				if use.metric == "" && m.Type == labels.MatchEqual {
					use.metric = m.Value
				}
				continue
			}
			use.labels = append(use.labels, m.Name)
		}
		// The grouping labels of the nearest aggregation above the
		// selector (through functions and ranges, not binary operators).
	up:
		for i := len(path) - 1; i >= 0; i-- {
			switch a := path[i].(type) {
			case *parser.AggregateExpr:
				if !a.Without {
					use.labels = append(use.labels, a.Grouping...)
				}
				break up
			case *parser.BinaryExpr:
				break up
			}
		}
		if use.metric == "" {
			t.Errorf("%s: a selector with no metric name: %s", q.where, vs)
		}
		out = append(out, use)
		return nil
	})
	return out
}

// scrape is the samples of a /metrics exposition: name → its label names.
type scrape map[string]map[string]bool

func parseScrape(t *testing.T, r io.Reader) scrape {
	t.Helper()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	s := scrape{}
	add := func(name string, lbls map[string]bool, extra ...string) {
		if s[name] == nil {
			s[name] = map[string]bool{}
		}
		for l := range lbls {
			s[name][l] = true
		}
		for _, l := range extra {
			s[name][l] = true
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			lbls := map[string]bool{}
			for _, l := range m.GetLabel() {
				lbls[l.GetName()] = true
			}
			if m.GetHistogram() != nil {
				add(name+"_bucket", lbls, "le")
				add(name+"_sum", lbls)
				add(name+"_count", lbls)
				continue
			}
			add(name, lbls)
		}
	}
	return s
}

// missing lists what of uses s lacks: metrics, or labels on them.
func (s scrape) missing(uses []selectorUse) []string {
	var out []string
	for _, u := range uses {
		got, ok := s[u.metric]
		if !ok {
			out = append(out, fmt.Sprintf("%s: metric %s", u.where, u.metric))
			continue
		}
		for _, l := range u.labels {
			if !got[l] && !slices.Contains(targetLabels, l) {
				out = append(out, fmt.Sprintf("%s: label %s on %s (it has %v)", u.where, l, u.metric, keys(got)))
			}
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// hpaMetric reads the Pods metric the chart's HorizontalPodAutoscaler
// scales on.
var hpaMetric = regexp.MustCompile(`metric:\s*\{\s*name:\s*([a-z_:]+)\s*\}`)

// Every metric the dashboard, the alert rules and the autoscaler query,
// and every label they match or group by, is one `streamgate serve`
// really exposes on /metrics once it has served the traffic they watch:
// streams (SSE, plain, llama2 text, to completion and cancelled), errors (404, 429, a
// 503 at the stream limit, an upstream timeout), a Redis that goes away
// (store errors) and a drain.
func TestQueriesMatchMetrics(t *testing.T) {
	redisServer := requireTool(t, "redis-server", "", "REDIS", "apt-get install -y redis-server")
	models := requireModels(t) // the engine's token counts are llama2's
	var uses []selectorUse
	for _, q := range dashboardQueries(t) {
		uses = append(uses, selectors(t, q)...)
	}
	var rules ruleFile
	readYAML(t, filepath.Join(root, "deploy", "prometheus", "alerts.yaml"), &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			uses = append(uses, selectors(t, query{"alert " + r.Alert, r.Expr})...)
		}
	}
	tmpl, err := os.ReadFile(filepath.Join(chartDir(), "templates", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := hpaMetric.FindSubmatch(tmpl)
	if m == nil {
		t.Fatal("templates/gateway.yaml: no HorizontalPodAutoscaler Pods metric found")
	}
	uses = append(uses, selectorUse{where: "HorizontalPodAutoscaler", metric: string(m[1])})

	s := scrapeServing(t, redisServer, models, uses)
	for _, miss := range s.missing(uses) {
		t.Errorf("not on /metrics: %s", miss)
	}
}

// scrapeServing runs `streamgate serve` with a real Redis, sends it the
// traffic the queries watch, and returns /metrics as it is during its
// drain, once it shows every metric of uses (or, after a while, as it is).
func scrapeServing(t *testing.T, redisServer, models string, uses []selectorUse) scrape {
	t.Helper()
	redisAddr := freeAddr(t)
	_, redisPort, _ := net.SplitHostPort(redisAddr)
	redis := start(t, redisServer, "--bind", "127.0.0.1", "--port", redisPort, "--save", "", "--appendonly", "no")
	redisURL := "redis://" + redisAddr + "/0"
	waitDial(t, redis, redisAddr)
	key := newKey(t, redisURL, "--name", "dash")
	limited := newKey(t, redisURL, "--name", "limited", "--rpm", "1")

	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	serve := startEnv(t, []string{"STREAMGATE_MODEL_DIR=" + models}, bin, "serve", "--model", "stories260k", "--http", httpAddr, "--grpc", grpcAddr, "--redis", redisURL,
		"--max-streams", "2", "--upstream-idle-timeout", "2s", "--shutdown-grace", "60s")
	base := "http://" + httpAddr
	waitReady(t, serve, base+"/readyz")

	post := func(key, path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	expect := func(what string, resp *http.Response, code int) {
		t.Helper()
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Fatalf("%s: %d, want %d\n%s", what, resp.StatusCode, code, b)
		}
	}
	const chat = `{"model":"echo","messages":[{"role":"user","content":"one two three four"}]`
	expect("streamed chat", post(key, "/v1/chat/completions", chat+`,"stream":true}`), 200)
	expect("chat", post(key, "/v1/chat/completions", chat+`}`), 200)
	expect("llama2 chat", post(key, "/v1/chat/completions", `{"model":"stories260k","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"Once"}]}`), 200)
	expect("unknown model", post(key, "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`), 404)
	expect("limited key, first", post(limited, "/v1/chat/completions", chat+`}`), 200)
	expect("limited key, second", post(limited, "/v1/chat/completions", chat+`}`), 429)
	// The target sends nothing for longer than --upstream-idle-timeout.
	expect("idle upstream", post(key, "/v2/models/repeat_int32/generate_stream", `{"IN":[1],"DELAY":[4000],"WAIT":0}`), 504)

	// Two slow streams fill --max-streams; a third request is refused.
	slow := func() (*http.Response, *bufio.Reader) {
		t.Helper()
		in, delay := make([]string, 60), make([]string, 60)
		for i := range in {
			in[i], delay[i] = fmt.Sprint(i), "500"
		}
		delay[0] = "0"
		resp := post(key, "/v2/models/repeat_int32/generate_stream",
			`{"IN":[`+strings.Join(in, ",")+`],"DELAY":[`+strings.Join(delay, ",")+`],"WAIT":0}`)
		if resp.StatusCode != 200 {
			t.Fatalf("slow stream: %d", resp.StatusCode)
		}
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("slow stream: %v", err)
			}
			if strings.HasPrefix(line, "data:") {
				return resp, r
			}
		}
	}
	held, _ := slow()
	defer held.Body.Close()
	left, _ := slow()
	expect("over --max-streams", post(key, "/v1/chat/completions", chat+`}`), 503)
	left.Body.Close() // the client leaves: a cancel upstream

	// Redis goes away. A key this replica has validated is cached and its
	// limits fall back to the replica's share (--limits-on-store-failure
	// open, the default): still served. A key it never saw cannot be
	// looked up: 503.
	unseen := newKey(t, redisURL, "--name", "unseen")
	redis.cmd.Process.Kill()
	<-redis.done
	expect("Redis down, a cached key", post(key, "/v1/chat/completions", chat+`}`), 200)
	expect("Redis down, a key not cached", post(unseen, "/v1/chat/completions", chat+`}`), 503)

	// SIGTERM: the gateway drains while the held stream runs.
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var s scrape
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatalf("/metrics while draining: %v", err)
		}
		s = parseScrape(t, resp.Body)
		resp.Body.Close()
		if len(s.missing(uses)) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // counters of a request that just ended
	}
	held.Body.Close()
	serve.waitExit(t, 30*time.Second)
	return s
}

// waitDial waits until addr accepts connections.
func waitDial(t *testing.T, p *process, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v", p.cmd.Path, p.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newKey makes an API key in Redis with `streamgate keys create` and
// returns its secret.
func newKey(t *testing.T, redisURL string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"keys", "create", "--redis", redisURL}, args...)...).Output()
	if err != nil {
		t.Fatalf("streamgate keys create: %v", err)
	}
	return strings.TrimSpace(string(out))
}
