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
	"gopkg.in/yaml.v3"
)

func TestComposeModule(t *testing.T) {
	mod, err := module.Load("compose/module.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checkModule(t, mod)
}

func TestKubernetesModule(t *testing.T) {
	data, err := os.ReadFile("kubernetes/statefun.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	found := false
	for {
		var doc struct {
			Kind     string
			Metadata struct{ Name string }
			Data     map[string]string
		}
		if err := dec.Decode(&doc); err != nil {
			break
		}
		if doc.Kind != "ConfigMap" || doc.Metadata.Name != "statefun-module" {
			continue
		}
		found = true
		mod, err := module.Parse("kubernetes/statefun.yaml (ConfigMap statefun-module)", []byte(doc.Data["module.yaml"]))
		if err != nil {
			t.Fatal(err)
		}
		checkModule(t, mod)
	}
	if !found {
		t.Fatal("kubernetes/statefun.yaml: no ConfigMap statefun-module with module.yaml")
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
// runtime takes (docs/cluster.md, "Trust between nodes"): compose's in a
// file, Kubernetes's in a Secret.
func TestClusterSecrets(t *testing.T) {
	if _, err := trust.LoadSecret("compose/cluster-secret"); err != nil {
		t.Error(err)
	}
	data, err := os.ReadFile("kubernetes/statefun.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	found := false
	for {
		var doc struct {
			Kind       string
			Metadata   struct{ Name string }
			StringData map[string]string `yaml:"stringData"`
		}
		if err := dec.Decode(&doc); err != nil {
			break
		}
		if doc.Kind == "Secret" && doc.Metadata.Name == "statefun-cluster-secret" {
			found = true
			if err := trust.CheckSecret([]byte(doc.StringData["secret"])); err != nil {
				t.Error(err)
			}
		}
	}
	if !found {
		t.Error("kubernetes/statefun.yaml: no Secret statefun-cluster-secret")
	}
}
