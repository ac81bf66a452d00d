package e2e

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/streamgate/streamgate/cmd/internal/stack"
)

// k8sContainer is the part of a Deployment's container the test reads.
type k8sContainer struct {
	Name           string   `yaml:"name"`
	Args           []string `yaml:"args"`
	ReadinessProbe k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  k8sProbe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Scheme string `yaml:"scheme"`
	} `yaml:"httpGet"`
}

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name   string `yaml:"name"`
					Secret *struct {
						SecretName string `yaml:"secretName"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// k8sObjects reads the objects of deploy/k8s/streamgate.yaml.
func k8sObjects(t *testing.T) []k8sObject {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "deploy", "k8s", "streamgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var objs []k8sObject
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
}

// The Kubernetes manifests run valid commands: every container's args
// parse as streamgate's flags; the gateways serve TLS from a mounted
// secret (mounted whole, so renewals reach the files), probed over HTTPS;
// every file a TLS flag names lies in a mounted secret.
func TestKubernetesManifestTLS(t *testing.T) {
	gatewayTLS := false
	for _, o := range k8sObjects(t) {
		if o.Kind != "Deployment" {
			continue
		}
		pod := o.Spec.Template.Spec
		secrets := map[string]bool{}
		for _, v := range pod.Volumes {
			secrets[v.Name] = v.Secret != nil
		}
		for _, c := range pod.Containers {
			if len(c.Args) == 0 {
				t.Fatalf("%s/%s: no args", o.Metadata.Name, c.Name)
			}
			f, err := stack.Parse(c.Args[0], c.Args[1:])
			if err != nil {
				t.Errorf("%s/%s: %v", o.Metadata.Name, c.Name, err)
				continue
			}
			files := []string{f.Engine.TLS.Cert, f.Engine.TLS.Key, f.Engine.TLS.ClientCA, f.Gateway.TLS.Cert, f.Gateway.TLS.Key,
				f.Gateway.TLS.ClientCA, f.Gateway.UpstreamFiles.CA, f.Gateway.UpstreamFiles.Cert, f.Gateway.UpstreamFiles.Key}
			for _, file := range files {
				if file == "" {
					continue
				}
				mounted := false
				for _, m := range c.VolumeMounts {
					if strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") && m.SubPath == "" && secrets[m.Name] {
						mounted = true
					}
				}
				if !mounted {
					t.Errorf("%s/%s: %s is not in a secret mounted whole", o.Metadata.Name, c.Name, file)
				}
			}
			serverTLS := f.Engine.TLS.Cert != "" || f.Gateway.TLS.Cert != ""
			if c.Args[0] == "gateway" {
				gatewayTLS = serverTLS
			}
			for _, p := range []k8sProbe{c.ReadinessProbe, c.LivenessProbe} {
				if p.HTTPGet != nil && (p.HTTPGet.Scheme == "HTTPS") != serverTLS {
					t.Errorf("%s/%s: probe scheme %q, TLS %v", o.Metadata.Name, c.Name, p.HTTPGet.Scheme, serverTLS)
				}
			}
		}
	}
	if !gatewayTLS {
		t.Error("the gateway Deployment does not serve TLS from a mounted secret")
	}
}
