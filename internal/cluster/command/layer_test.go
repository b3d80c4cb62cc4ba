package command

import (
	"os/exec"
	"strings"
	"testing"
)

// The command sender is cluster plumbing beneath the state API: it must
// not depend on the API's package (the API holds its Commands, and hands
// it the receipt decoder), or the arrows would run both ways.
func TestDoesNotDependOnTheStateAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/statefun-go/statefun/internal/stateapi" {
			t.Fatalf("internal/cluster/command depends on %s", dep)
		}
	}
}
