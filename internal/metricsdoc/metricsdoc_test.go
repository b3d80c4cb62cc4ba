package metricsdoc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree writes files (path from root → content) under a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const header = "package engine\n\nimport p \"github.com/prometheus/client_golang/prometheus\"\n\n"

// The repository's own metrics are found with their type and labels.
func TestScanRepository(t *testing.T) {
	ms, err := Scan("../..")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m Metric) bool { return m.Name == "statefun_invocations_total" })
	if i < 0 {
		t.Fatalf("statefun_invocations_total not found among %d metrics", len(ms))
	}
	if m := ms[i]; m.Type != "counter" || !slices.Equal(m.Labels, []string{"function", "outcome"}) || m.Pkg != "internal/engine" {
		t.Errorf("statefun_invocations_total read as %+v", m)
	}
	if len(ms) < 50 {
		t.Errorf("%d metrics; the runtime defines more than 50", len(ms))
	}
}

// A metric the generator cannot read is an error naming where it is,
// never a metric left out of the page; tests are not read.
func TestScanRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"desc", `var d = p.NewDesc("x", "y", nil, nil)`, "engine/m.go:5: prometheus.NewDesc"},
		{"computed name", `var n = "x"; var c = p.NewCounter(p.CounterOpts{Name: n, Help: "h"})`, "not a string literal"},
		{"namespace", `var c = p.NewCounter(p.CounterOpts{Namespace: "a", Name: "b", Help: "h"})`, "Namespace is not read"},
		{"labels in a variable", `var l = []string{"a"}; var c = p.NewCounterVec(p.CounterOpts{Name: "x", Help: "h"}, l)`, "the labels of x"},
	} {
		root := tree(t, map[string]string{"internal/engine/m.go": header + tc.src + "\n",
			"internal/engine/m_test.go": header + `var d = p.NewDesc("x", "y", nil, nil)` + "\n"})
		if _, err := Scan(root); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	root := tree(t, map[string]string{"internal/newpkg/m.go": strings.Replace(header, "engine", "newpkg", 1) +
		`var c = p.NewGauge(p.GaugeOpts{Name: "statefun_new", Help: "h"})` + "\n"})
	if _, err := Scan(root); err == nil || !strings.Contains(err.Error(), "add internal/newpkg to sections") {
		t.Errorf("a package with no section: %v", err)
	}
}
