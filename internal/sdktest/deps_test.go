package sdktest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProtoPackagesStayApart checks that no binary built from these
// packages links both the official SDK and internal/protocol: the two
// register the same proto names and the second registration panics at init.
func TestProtoPackagesStayApart(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not on PATH")
	}
	const (
		sdk      = "github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
		protocol = "github.com/statefun-go/statefun/internal/protocol"
		self     = "github.com/statefun-go/statefun/internal/sdktest"
	)
	for pkg, forbidden := range map[string]string{
		self:                    sdk,
		self + "/sdkcmd":        protocol,
		self + "/sdkfn":         protocol,
		self + "/cmd/sdkserver": protocol,
	} {
		out, err := exec.Command(goTool, "list", "-test", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == forbidden {
				t.Errorf("%s links %s", pkg, forbidden)
			}
		}
	}
}
