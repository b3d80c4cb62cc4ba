package partition

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// The core does no I/O, reads no clock and starts no goroutines: it must
// stay steppable one event at a time. This keeps it so with an allowlist:
// every package of this module that the core depends on (go list -deps) may
// import only the packages below, and every other non-standard dependency
// must come from an allowed module. A new import is a deliberate change
// here, not an accident.
func TestDependencyAllowlist(t *testing.T) {
	const module = "github.com/statefun-go/statefun/"
	allowedStd := map[string]bool{
		"container/heap": true, "errors": true, "fmt": true, "sort": true, "strings": true,
		"strconv": true, "slices": true, "maps": true, "unicode/utf8": true, "unicode": true, "hash/fnv": true,
		"math": true, "bytes": true,
		// the generated protobuf code of internal/protocol
		"reflect": true, "sync": true, "unsafe": true,
	}
	allowedModule := map[string]bool{
		module + "internal/partition": true,
		module + "internal/address":   true,
		module + "internal/protocol":  true,
	}
	allowedThirdParty := []string{"google.golang.org/protobuf/"}
	// internal/protocol is generated code: its sync and reflect are the
	// protobuf runtime's, not the core's.
	generated := map[string]bool{module + "internal/protocol": true}

	out, err := exec.Command("go", "list", "-deps", "-json", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var pkg struct {
			ImportPath string
			Standard   bool
			Imports    []string
		}
		if err := dec.Decode(&pkg); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch {
		case pkg.Standard:
			continue
		case strings.HasPrefix(pkg.ImportPath, module):
			if !allowedModule[pkg.ImportPath] {
				t.Errorf("the partition core depends on %s, which is not on the allowlist", pkg.ImportPath)
				continue
			}
			for _, imp := range pkg.Imports {
				if imp == "sync" || imp == "reflect" || imp == "unsafe" {
					if !generated[pkg.ImportPath] {
						t.Errorf("%s imports %s: the partition core must stay single-threaded and plain", pkg.ImportPath, imp)
					}
					continue
				}
				if !allowedStd[imp] && !allowedModule[imp] && !hasAnyPrefix(imp, allowedThirdParty) {
					t.Errorf("%s imports %s, which is not on the allowlist: the partition core must do no I/O and read no clock", pkg.ImportPath, imp)
				}
			}
		default:
			if !hasAnyPrefix(pkg.ImportPath, allowedThirdParty) {
				t.Errorf("the partition core depends on %s, which is not on the allowlist", pkg.ImportPath)
			}
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
