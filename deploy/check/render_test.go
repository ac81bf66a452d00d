package check

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kubeVersion is the Kubernetes version the chart is rendered for: the
// oldest its Chart.yaml allows (preStop's sleep action is on by default
// from 1.30).
const kubeVersion = "1.30.0"

// kinds are the object kinds deploy/ may render, by apiVersion/kind: any
// other is an error, so that every object is decoded into its type.
var kinds = map[string]func() any{
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/Secret":                              func() any { return &corev1.Secret{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
}

// object is one decoded manifest object.
type object struct {
	kind, name string
	v          any // *appsv1.Deployment, ...
}

// manifests is what one source renders: the chart with one values file,
// or deploy/k8s.
type manifests struct {
	source  string
	objects []object
}

func (m manifests) find(kind, name string) any {
	for _, o := range m.objects {
		if o.kind == kind && o.name == name {
			return o.v
		}
	}
	return nil
}

// docSep splits a multi-document YAML stream.
var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeStrict decodes every document of data into its Kubernetes type:
// unknown or duplicate fields, or a kind not in kinds, fail the test.
func decodeStrict(t *testing.T, source string, data []byte) manifests {
	t.Helper()
	m := manifests{source: source}
	for i, doc := range docSep.Split(string(data), -1) {
		j, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			t.Fatalf("%s: document %d: %v\n%s", source, i, err, doc)
		}
		if bytes.Equal(j, []byte("null")) {
			continue // comments only
		}
		var tm metav1.TypeMeta
		if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
			t.Fatalf("%s: document %d: %v", source, i, err)
		}
		mk, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			t.Fatalf("%s: document %d: %s %s is not a kind this check decodes", source, i, tm.APIVersion, tm.Kind)
		}
		v := mk()
		strict, err := kjson.UnmarshalStrict(j, v)
		if err != nil {
			t.Fatalf("%s: document %d (%s): %v", source, i, tm.Kind, err)
		}
		if len(strict) > 0 {
			t.Errorf("%s: document %d (%s): %v", source, i, tm.Kind, strict)
		}
		meta := v.(metav1.ObjectMetaAccessor).GetObjectMeta()
		if meta.GetName() == "" {
			t.Errorf("%s: document %d (%s) has no name", source, i, tm.Kind)
		}
		m.objects = append(m.objects, object{kind: tm.Kind, name: meta.GetName(), v: v})
	}
	if len(m.objects) == 0 {
		t.Fatalf("%s: no objects", source)
	}
	return m
}

// chartDir is the Helm chart.
func chartDir() string { return filepath.Join(root, "deploy", "helm", "streamgate") }

// helm returns the helm binary: $STREAMGATE_HELM, or helm on PATH (.ci/run
// installs it with `go install helm.sh/helm/v3/cmd/helm@v3.22.0`).
func helm(t *testing.T) string {
	t.Helper()
	return requireTool(t, "helm", "STREAMGATE_HELM", "HELM",
		"go install helm.sh/helm/v3/cmd/helm@v3.22.0")
}

// valuesMatrix is what CI renders the chart with: its defaults and every
// values file in its ci/ folder (the shapes deploy/README.md shows).
func valuesMatrix(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(), "ci", "*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("chart values files: %v %v", files, err)
	}
	return append([]string{""}, files...)
}

// renderChart runs helm template with a values file ("" for the
// defaults) and more arguments; it returns the output, or the error and
// its output.
func renderChart(t *testing.T, values string, more ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "sg", chartDir(), "--namespace", "inference", "--kube-version", kubeVersion}
	if values != "" {
		args = append(args, "--values", values)
	}
	args = append(args, more...)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm(t), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stderr.Bytes(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// everyManifest renders the chart over its values matrix and reads
// deploy/k8s, decoding each strictly.
func everyManifest(t *testing.T) []manifests {
	t.Helper()
	var all []manifests
	for _, values := range valuesMatrix(t) {
		out, err := renderChart(t, values)
		if err != nil {
			t.Fatal(err)
		}
		name := "chart defaults"
		if values != "" {
			name = "chart " + filepath.Base(values)
		}
		all = append(all, decodeStrict(t, name, out))
	}
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "k8s", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("deploy/k8s has no manifests")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, decodeStrict(t, "deploy/k8s/"+filepath.Base(f), data))
	}
	return all
}

// `helm lint --strict` passes with every values file of the matrix.
func TestChartLints(t *testing.T) {
	for _, values := range valuesMatrix(t) {
		args := []string{"lint", "--strict", chartDir(), "--kube-version", kubeVersion}
		if values != "" {
			args = append(args, "--values", values)
		}
		out, err := exec.Command(helm(t), args...).CombinedOutput()
		if err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The chart renders, over its values matrix, only objects that decode
// strictly into Kubernetes' types, with what each shape needs.
func TestChartRendersShapes(t *testing.T) {
	for _, m := range everyManifest(t) {
		if !strings.HasPrefix(m.source, "chart") {
			continue
		}
		gw, _ := m.find("Deployment", "sg-streamgate-gateway").(*appsv1.Deployment)
		if gw == nil {
			t.Errorf("%s: no gateway Deployment", m.source)
			continue
		}
		if m.find("Service", "sg-streamgate-gateway") == nil {
			t.Errorf("%s: no gateway Service", m.source)
		}
		replicas := gw.Spec.Replicas
		hpa, _ := m.find("HorizontalPodAutoscaler", "sg-streamgate-gateway").(*autoscalingv2.HorizontalPodAutoscaler)
		if (replicas != nil && *replicas > 1 || hpa != nil) && m.find("PodDisruptionBudget", "sg-streamgate-gateway") == nil {
			t.Errorf("%s: several gateways and no PodDisruptionBudget", m.source)
		}
		if hpa != nil && replicas != nil {
			t.Errorf("%s: the Deployment sets replicas beside its HorizontalPodAutoscaler (they would fight)", m.source)
		}
		if len(gw.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
			t.Errorf("%s: gateway pods are not spread", m.source)
		}
	}
}

// Values the gateway would refuse, or that leave it nothing to serve, fail
// at render time with a message that names them.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		set, want string
	}{
		{"engine.enabled=false", "no upstream"},
		{"redis.enabled=true,redis.url=redis://x:6379", "redis.enabled and redis.url"},
		{"redis.enabled=true,keys.fileSecret=keys", "keys.fileSecret and Redis"},
		{"keys.disabled=true,keys.fileSecret=keys,gateway.replicas=1", "keys.fileSecret and keys.disabled"},
		{"keys.fileSecret=keys,gateway.replicas=3", "several gateway replicas"},
		{"engine.enabled=false,upstream.service.enabled=true", "needs upstream.service.selector"},
	} {
		out, err := renderChart(t, "", "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s rendered", tc.set)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("--set %s: %s, want an error with %q", tc.set, out, tc.want)
		}
	}
}
