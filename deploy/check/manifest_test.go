package check

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// stopTail is what a streamgate process may take after --shutdown-grace
// before it exits (cmd/internal/stack's Stop and cmd/streamgate's serve):
// 1 s to cut the connections of clients that do not read
// (gateway.Options.StopTimeout), 2 s to shut the HTTP server's idle
// connections, 5 s to flush telemetry.
const stopTail = 8 * time.Second

// commands are streamgate's commands that run a server.
var commands = []string{"serve", "engine", "gateway"}

// listenFlags are the flags that open a listener.
var listenFlags = []string{"http", "grpc", "metrics"}

// fileFlags name files or directories the process reads.
var fileFlags = []string{"tls-cert", "tls-key", "tls-client-ca", "keys-file", "upstream-ca", "upstream-cert", "upstream-key", "model-dir", "models"}

// workload is a pod template and where it came from.
type workload struct {
	kind, name string
	labels     map[string]string
	pod        *corev1.PodSpec
}

func (m manifests) workloads() []workload {
	var out []workload
	for _, o := range m.objects {
		switch v := o.v.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{o.kind, o.name, v.Spec.Template.Labels, &v.Spec.Template.Spec})
		case *appsv1.StatefulSet:
			out = append(out, workload{o.kind, o.name, v.Spec.Template.Labels, &v.Spec.Template.Spec})
		}
	}
	return out
}

// selects reports whether selector picks a pod with labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// parseArgs reads a streamgate container's arguments as the command's
// flags: name → value ("true" for a bare boolean). Unknown flags and
// stray arguments are errors.
func parseArgs(ref reference, command string, args []string) (map[string]string, []string) {
	known := ref.flags[command]
	flags := map[string]string{}
	var errs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			errs = append(errs, "stray argument "+strconv.Quote(a))
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takes, ok := known[name]
		if !ok {
			errs = append(errs, "--"+name+" is not a flag of "+command+" (streamgate help config)")
			continue
		}
		switch {
		case hasValue:
		case !takes:
			value = "true"
		case i+1 < len(args):
			i++
			value = args[i]
		default:
			errs = append(errs, "--"+name+" has no value")
		}
		flags[name] = value
	}
	return flags, errs
}

// varRef is a $(NAME) reference Kubernetes expands in args.
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// probeTargets is what the live checks must find served: HTTP paths on
// the gateway and gRPC health on the engine.
type probeTargets struct {
	httpPaths  map[string]bool
	grpcHealth bool
}

// checkContainer asserts what matters of one streamgate container: its
// flags exist, its ports are its listeners, its probes hit its health
// routes on the right port and scheme, its variables are in the
// configuration reference, its files are mounted and its drain fits the
// pod's grace period.
func checkContainer(t *testing.T, ref reference, where string, w workload, c *corev1.Container, live *probeTargets) {
	t.Helper()
	if len(c.Args) == 0 || !slices.Contains(commands, c.Args[0]) {
		t.Errorf("%s: args %q do not start with a server command %v", where, c.Args, commands)
		return
	}
	command := c.Args[0]
	flags, errs := parseArgs(ref, command, c.Args[1:])
	for _, e := range errs {
		t.Errorf("%s: %s", where, e)
	}

	// Ports: every listener is a container port and every container port
	// a listener.
	ports := map[string]int32{} // port name → number
	listening := map[int32]string{}
	for _, f := range listenFlags {
		addr, ok := flags[f]
		if !ok || addr == "" {
			continue
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Errorf("%s: --%s %q: %v", where, f, addr, err)
			continue
		}
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			t.Errorf("%s: --%s %s listens on loopback: nothing outside the pod reaches it", where, f, addr)
		}
		n, _ := strconv.Atoi(port)
		listening[int32(n)] = f
	}
	for _, p := range c.Ports {
		if p.Name != "" {
			ports[p.Name] = p.ContainerPort
		}
		if _, ok := listening[p.ContainerPort]; !ok {
			t.Errorf("%s: containerPort %d (%s) is no listener's port (--http, --grpc, --metrics: %v)", where, p.ContainerPort, p.Name, listening)
		}
	}
	for n, f := range listening {
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == n }) {
			t.Errorf("%s: --%s's port %d is not a containerPort", where, f, n)
		}
	}
	resolve := func(p intstr.IntOrString) int32 {
		if p.Type == intstr.String {
			n, ok := ports[p.StrVal]
			if !ok {
				t.Errorf("%s: probe port %q names no container port", where, p.StrVal)
			}
			return n
		}
		return p.IntVal
	}

	// Probes: on the real health routes, served by the listener they name.
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Errorf("%s: needs a readiness and a liveness probe", where)
	}
	tls := flags["tls-cert"] != ""
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		switch {
		case p == nil:
		case p.HTTPGet != nil:
			if f := listening[resolve(p.HTTPGet.Port)]; f != "http" {
				t.Errorf("%s: HTTP probe %s on port %v, not --http's (%q)", where, p.HTTPGet.Path, p.HTTPGet.Port.String(), f)
			}
			if (p.HTTPGet.Scheme == corev1.URISchemeHTTPS) != tls {
				t.Errorf("%s: probe scheme %q with --tls-cert %q", where, p.HTTPGet.Scheme, flags["tls-cert"])
			}
			live.httpPaths[p.HTTPGet.Path] = true
		case p.GRPC != nil:
			if f := listening[p.GRPC.Port]; f != "grpc" {
				t.Errorf("%s: gRPC probe on port %d, not --grpc's (%q)", where, p.GRPC.Port, f)
			}
			if p.GRPC.Service != nil && *p.GRPC.Service != "" {
				t.Errorf("%s: gRPC probe of service %q: the engine's health server answers for \"\"", where, *p.GRPC.Service)
			}
			if flags["tls-cert"] != "" {
				t.Errorf("%s: gRPC probe of a TLS listener: Kubernetes' gRPC probes do not speak TLS", where)
			}
			live.grpcHealth = true
		default:
			t.Errorf("%s: a probe that is neither httpGet nor grpc: probe the health routes", where)
		}
	}

	// Variables: in the configuration reference, or used by the args.
	used := map[string]bool{}
	for _, a := range c.Args {
		for _, m := range varRef.FindAllStringSubmatch(a, -1) {
			used[m[1]] = true
		}
	}
	defined := map[string]bool{}
	for _, e := range c.Env {
		defined[e.Name] = true
		if !ref.env[command][e.Name] && !used[e.Name] {
			t.Errorf("%s: env %s is not a variable `streamgate %s` reads (streamgate help config), nor used by its args", where, e.Name, command)
		}
	}
	for name := range used {
		if !defined[name] {
			t.Errorf("%s: args use $(%s), which the container's env does not define", where, name)
		}
	}

	// Files: in a mounted volume, mounted whole (no subPath: renewals of
	// certificates reach the files).
	for _, f := range fileFlags {
		file := flags[f]
		if file == "" {
			continue
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			dir := strings.TrimSuffix(m.MountPath, "/")
			if (file == dir || strings.HasPrefix(file, dir+"/")) && m.SubPath == "" {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s: --%s %s is in no volume mounted whole", where, f, file)
		}
	}

	// Drain: preStop (while the endpoints go), then --shutdown-grace, then
	// the process' tail, all within the grace period.
	grace := 30 * time.Second // Kubernetes' default
	if g := w.pod.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	shutdown := 10 * time.Second // --shutdown-grace's default
	if s, ok := flags["shutdown-grace"]; ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Errorf("%s: --shutdown-grace %q: %v", where, s, err)
		}
		shutdown = d
	}
	var preStop time.Duration
	switch l := c.Lifecycle; {
	case l == nil || l.PreStop == nil:
		t.Errorf("%s: no preStop: the pod gets SIGTERM, and starts refusing requests, while its endpoints still route to it", where)
	case l.PreStop.Sleep != nil:
		preStop = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
	default:
		t.Errorf("%s: preStop %+v: the image has no shell or sleep; use the sleep action", where, l.PreStop)
	}
	if need := preStop + shutdown + stopTail; grace < need {
		t.Errorf("%s: terminationGracePeriodSeconds %v < preStop %v + --shutdown-grace %v + %v of stop: Kubernetes kills the drain",
			where, grace, preStop, shutdown, stopTail)
	}
}

// checkServices asserts that Services, budgets and autoscalers reach
// what exists: selectors pick pods, target ports are container ports, a
// dns:/// upstream or a Redis URL that names a Service of the same
// manifests has its port (and, for dns:///, is headless).
func checkServices(t *testing.T, m manifests) {
	t.Helper()
	pods := m.workloads()
	podsOf := func(sel map[string]string) []workload {
		var out []workload
		for _, w := range pods {
			if selects(sel, w.labels) {
				out = append(out, w)
			}
		}
		return out
	}
	hasPort := func(ws []workload, p intstr.IntOrString) bool {
		for _, w := range ws {
			for _, c := range w.pod.Containers {
				for _, cp := range c.Ports {
					if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
						return true
					}
				}
			}
		}
		return false
	}
	services := map[string]*corev1.Service{}
	for _, o := range m.objects {
		switch v := o.v.(type) {
		case *corev1.Service:
			services[o.name] = v
			selected := podsOf(v.Spec.Selector)
			if len(selected) == 0 {
				if !strings.HasSuffix(o.name, "-upstream") { // selects pods of another release (Triton)
					t.Errorf("%s: Service %s selects no pods of these manifests", m.source, o.name)
				}
				continue
			}
			for _, p := range v.Spec.Ports {
				tp := p.TargetPort
				if tp.Type == intstr.Int && tp.IntVal == 0 {
					tp = intstr.FromInt32(p.Port)
				}
				if !hasPort(selected, tp) {
					t.Errorf("%s: Service %s port %d targets %s, no container port of its pods", m.source, o.name, p.Port, tp.String())
				}
			}
		case *policyv1.PodDisruptionBudget:
			if v.Spec.Selector == nil || len(podsOf(v.Spec.Selector.MatchLabels)) == 0 {
				t.Errorf("%s: PodDisruptionBudget %s selects no pods", m.source, o.name)
			}
		case *autoscalingv2.HorizontalPodAutoscaler:
			ref := v.Spec.ScaleTargetRef
			if ref.APIVersion != "apps/v1" || m.find(ref.Kind, ref.Name) == nil {
				t.Errorf("%s: HorizontalPodAutoscaler %s scales %s %s %s, not in these manifests", m.source, o.name, ref.APIVersion, ref.Kind, ref.Name)
			}
		}
	}
	// Where the gateways connect.
	ref := configReference(t)
	for _, w := range pods {
		for _, c := range w.pod.Containers {
			if len(c.Args) == 0 || c.Args[0] != "gateway" {
				continue
			}
			flags, _ := parseArgs(ref, "gateway", c.Args[1:])
			var targets []string
			for _, u := range strings.Split(flags["upstream"], ",") {
				targets = append(targets, strings.TrimSpace(u))
			}
			if r := flags["redis"]; r != "" {
				u, err := url.Parse(strings.ReplaceAll(r, "$(REDIS_PASSWORD)", "x"))
				if err != nil {
					t.Errorf("%s: --redis %q: %v", m.source, r, err)
				} else {
					targets = append(targets, "redis:"+u.Host)
				}
			}
			for _, target := range targets {
				dns := strings.HasPrefix(target, "dns:///")
				host, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(target, "dns:///"), "redis:"))
				if err != nil {
					t.Errorf("%s: gateway target %q: %v", m.source, target, err)
					continue
				}
				svc := services[strings.Split(host, ".")[0]]
				if svc == nil {
					continue // outside these manifests (an existing Triton or Redis)
				}
				n, _ := strconv.Atoi(port)
				if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == int32(n) }) {
					t.Errorf("%s: gateway target %s: Service %s has no port %d", m.source, target, svc.Name, n)
				}
				if dns && svc.Spec.ClusterIP != corev1.ClusterIPNone {
					t.Errorf("%s: gateway target %s: Service %s is not headless, so the name resolves to one virtual IP and the gateways see one target", m.source, target, svc.Name)
				}
			}
		}
	}
}

// Every streamgate container the chart (over its values matrix) and
// deploy/k8s render runs flags the command has, listens where its ports
// and probes say, probes routes the server answers (checked against a
// running `streamgate serve`), reads only variables of the configuration
// reference, and drains within its pod's grace period; Services and
// budgets reach their pods.
func TestManifestsMatchTheServer(t *testing.T) {
	ref := configReference(t)
	live := &probeTargets{httpPaths: map[string]bool{}}
	gateways := 0
	for _, m := range everyManifest(t) {
		checkServices(t, m)
		for _, w := range m.workloads() {
			for i := range w.pod.Containers {
				c := &w.pod.Containers[i]
				if !strings.Contains(c.Image, "streamgate") {
					continue // redis
				}
				if c.Args[0] == "gateway" {
					gateways++
				}
				checkContainer(t, ref, m.source+": "+w.kind+" "+w.name+"/"+c.Name, w, c, live)
			}
		}
	}
	if gateways == 0 {
		t.Fatal("no gateway container checked")
	}

	// The routes and the health service the probes use, on a real server.
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	p := start(t, bin, "serve", "--http", httpAddr, "--grpc", grpcAddr)
	waitReady(t, p, "http://"+httpAddr+"/healthz")
	if len(live.httpPaths) == 0 || !live.grpcHealth {
		t.Errorf("probes: HTTP paths %v, gRPC health %v: expected both kinds", live.httpPaths, live.grpcHealth)
	}
	for path := range live.httpPaths {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("probe path %s: %d from a ready server", path, resp.StatusCode)
		}
	}
	if live.grpcHealth {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("grpc.health.v1 Check on the engine: %v %v", resp, err)
		}
	}
}
