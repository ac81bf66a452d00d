package e2e

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/streamgate/streamgate/cmd/internal/stack"
)

// redisHost is the host of the --redis URL of a gateway's args, which
// must parse as streamgate's flags.
func redisHost(t *testing.T, where string, args []string) string {
	t.Helper()
	f, err := stack.Parse(args[0], args[1:])
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if f.Gateway.Redis == "" {
		t.Fatalf("%s: the gateway has no --redis: replicas would not share keys, limits and streams", where)
	}
	u, err := url.Parse(f.Gateway.Redis)
	if err != nil {
		t.Fatalf("%s: --redis %q: %v", where, f.Gateway.Redis, err)
	}
	return u.Hostname()
}

// The deploy files run Redis and point every gateway replica at it.
func TestDeployFilesShareRedis(t *testing.T) {
	root := moduleRoot(t)
	t.Run("compose", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(root, "deploy", "compose.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Services map[string]struct {
				Image   string   `yaml:"image"`
				Command []string `yaml:"command"`
			} `yaml:"services"`
		}
		if err := yaml.Unmarshal(data, &c); err != nil {
			t.Fatal(err)
		}
		host := redisHost(t, "compose gateway", c.Services["gateway"].Command)
		if r, ok := c.Services[host]; !ok || !strings.HasPrefix(r.Image, "redis:") {
			t.Errorf("the gateway's Redis %q is not a redis service of compose.yaml", host)
		}
	})
	t.Run("kubernetes", func(t *testing.T) {
		kinds := map[string]string{} // name -> kind
		var gatewayArgs []string
		for _, o := range k8sObjects(t) {
			kinds[o.Metadata.Name+"/"+o.Kind] = o.Kind
			for _, c := range o.Spec.Template.Spec.Containers {
				if len(c.Args) > 0 && c.Args[0] == "gateway" {
					gatewayArgs = c.Args
				}
			}
		}
		host := redisHost(t, "k8s gateway", gatewayArgs)
		if kinds[host+"/Service"] == "" || kinds[host+"/StatefulSet"] == "" {
			t.Errorf("the gateway's Redis %q is not a Service and StatefulSet of streamgate.yaml (have %v)", host, kinds)
		}
	})
}
