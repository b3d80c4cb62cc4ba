// Package deploy holds the deployment starting points of cluster mode
// (README.md); its test checks that the modules they carry are valid, so
// that the examples do not rot while nothing runs them.
package deploy

import (
	"os"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/module"
	"go.yaml.in/yaml/v3"
)

func TestComposeModule(t *testing.T) {
	mod, err := module.Load("compose/module.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checkModule(t, mod)
}

func TestKubernetesModule(t *testing.T) {
	var cm struct{ Data map[string]string }
	if !kubernetesDoc(t, "ConfigMap", "statefun-module", &cm) {
		t.Fatal("kubernetes/statefun.yaml: no ConfigMap statefun-module with module.yaml")
	}
	mod, err := module.Parse("kubernetes/statefun.yaml (ConfigMap statefun-module)", []byte(cm.Data["module.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	checkModule(t, mod)
}

// kubernetesDoc decodes the document of kind and name in
// kubernetes/statefun.yaml into v; false when there is none.
func kubernetesDoc(t *testing.T, kind, name string, v any) bool {
	t.Helper()
	data, err := os.ReadFile("kubernetes/statefun.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	for {
		var node yaml.Node
		if err := dec.Decode(&node); err != nil {
			return false
		}
		var head struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if node.Decode(&head) == nil && head.Kind == kind && head.Metadata.Name == name {
			if err := node.Decode(v); err != nil {
				t.Fatal(err)
			}
			return true
		}
	}
}

// checkModule asserts what the examples promise: the greeter's functions,
// a Kafka ingress and an exactly-once Kafka egress.
func checkModule(t *testing.T, mod *module.Module) {
	t.Helper()
	if len(mod.Endpoints) != 1 || len(mod.KafkaIngresses) != 1 || len(mod.KafkaEgresses) != 1 {
		t.Fatalf("module: %d endpoints, %d Kafka ingresses, %d Kafka egresses; want 1 of each",
			len(mod.Endpoints), len(mod.KafkaIngresses), len(mod.KafkaEgresses))
	}
}

// The examples run with tokens, so they carry a cluster secret the
// runtime takes (docs/explanation/cluster.md, "Trust between nodes"): compose's in a
// file, Kubernetes's in a Secret.
func TestClusterSecrets(t *testing.T) {
	if _, err := trust.LoadSecret("compose/cluster-secret"); err != nil {
		t.Error(err)
	}
	var secret struct {
		StringData map[string]string `yaml:"stringData"`
	}
	if !kubernetesDoc(t, "Secret", "statefun-cluster-secret", &secret) {
		t.Fatal("kubernetes/statefun.yaml: no Secret statefun-cluster-secret")
	}
	if err := trust.CheckSecret([]byte(secret.StringData["secret"])); err != nil {
		t.Error(err)
	}
}
