package cycle

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// The machine does no I/O, reads no clock and starts no goroutine, so that
// both of its shells — the session against Kafka, the test double against
// a model of it — and its scripts step it one decision at a time. Its
// imports are an allowlist (time for Duration and Time values only), and
// its sources are searched for clock reads and go statements.
func TestPure(t *testing.T) {
	allowed := map[string]bool{"errors": true, "fmt": true, "maps": true, "slices": true, "strings": true, "time": true}
	out, err := exec.Command("go", "list", "-json", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkg struct{ Imports, GoFiles []string }
	if err := json.Unmarshal(out, &pkg); err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if !allowed[imp] {
			t.Errorf("the commit cycle's machine imports %s, which is not on the allowlist: it must do no I/O", imp)
		}
	}
	impure := regexp.MustCompile(`time\.(Now|Since|Until|After|AfterFunc|Sleep|NewTimer|NewTicker|Tick)\b|\bgo func|\bgo [a-zA-Z_.]+\(`)
	for _, f := range pkg.GoFiles {
		src, err := os.ReadFile(filepath.Clean(f))
		if err != nil {
			t.Fatal(err)
		}
		if loc := impure.FindIndex(src); loc != nil {
			t.Errorf("%s: %q: the machine reads no clock and starts no goroutine (time is an argument)", f, src[loc[0]:loc[1]])
		}
	}
}
