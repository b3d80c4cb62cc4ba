package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestKeySpacesAreDistinct reads every space* byte constant of the package's
// sources and refuses two with one value: key spaces are declared in
// several files (keys.go, history.go, ...), and two parts of the store
// sharing a first byte would read each other's records as their own.
// (It happened once: pauses and the history's age index were both 0x11.)
func TestKeySpacesAreDistinct(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	byValue := map[uint64]string{}
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Values) != len(vs.Names) {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "space") {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.INT {
					continue
				}
				v, err := strconv.ParseUint(lit.Value, 0, 8)
				if err != nil {
					t.Fatalf("%s: %s = %s: %v", fset.Position(lit.Pos()), name.Name, lit.Value, err)
				}
				found++
				if other, dup := byValue[v]; dup {
					t.Errorf("%s and %s are both key space %#02x", other, name.Name, v)
				}
				byValue[v] = name.Name
			}
			return true
		})
	}
	if found < 10 {
		t.Fatalf("found only %d key-space constants; has their naming changed?", found)
	}
}
