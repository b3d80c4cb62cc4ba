package partition

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The core does no I/O and reads no clock (DESIGN.md §8): it must stay
// steppable one event at a time. This keeps it so.
func TestForbiddenImports(t *testing.T) {
	forbidden := []string{"net", "net/http", "os", "io/fs", "time", "log", "log/slog", "math/rand", "math/rand/v2", "sync"}
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if p == bad || strings.Contains(p, "pebble") || strings.Contains(p, "franz-go") {
					t.Errorf("%s imports %s: the partition core must do no I/O and read no clock", f, p)
					break
				}
			}
		}
	}
}
