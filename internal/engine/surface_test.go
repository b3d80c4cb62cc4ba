package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// engineRoles are the roles *Engine serves, each with the exported
// methods that serve it and the interfaces its consumers define where they
// use it (doc.go describes them). A new exported method belongs to one of
// them, and to its consumer's interface, or is not exported.
var engineRoles = map[string][]string{
	// The partition host: made by New, run, stopped; internal/app holds it
	// (and Driver steps a Driven engine in the simulation).
	"host": {"Start", "Close", "Failed", "Err", "Partitions", "Driver"},
	// The ingresses: ingress.Sink, kafkaingress.Engine.
	"ingest": {"Ingest", "IngestOnce", "IngestFrom", "SourcePositions"},
	// The egress outbox: egress.Source, kafkaegress.Outbox.
	"outbox": {"PopEgress", "ReadEgress", "ReadEgressBatch", "AckEgress"},
	// The state API's partition work: stateapi.Engine (Repairer,
	// InboxRepairer, Overviewer), and Reads for its stateapi.Store; its
	// bulk jobs' (jobs.Engine, stateapi.JobsEngine): PutJob, and
	// CallLatencies for their pace.
	"state": {"Read", "Mutate", "WaitReceipt", "SpecsOf", "KnownTypes", "WaitDurable",
		"Failing", "Inbox", "Pauses", "Pause", "PauseIn", "Repair", "RepairDelayed", "Resend",
		"QueuedByType", "Reads", "PutJob", "CallLatencies"},
	// The cluster seam: node.Engine (the session's side), and Owned for
	// the request forwarder.
	"cluster": {"Owned", "Assign", "Revoke", "Full", "SubmitArrivals", "ForgetReadPosition"},
}

// TestEngineSurfaceByRole fails when *Engine has an exported method no
// role lists (say which role it serves, or unexport it), or a role lists
// one it does not have.
func TestEngineSurfaceByRole(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, f := range pkgs["engine"].Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !fd.Name.IsExported() {
				continue
			}
			rt := fd.Recv.List[0].Type
			if st, ok := rt.(*ast.StarExpr); ok {
				rt = st.X
			}
			if id, ok := rt.(*ast.Ident); ok && id.Name == "Engine" {
				have = append(have, fd.Name.Name)
			}
		}
	}
	listed := map[string]string{}
	for role, ms := range engineRoles {
		for _, m := range ms {
			if r, dup := listed[m]; dup {
				t.Errorf("%s is listed in roles %s and %s", m, r, role)
			}
			listed[m] = role
		}
	}
	sort.Strings(have)
	for _, m := range have {
		if _, ok := listed[m]; !ok {
			t.Errorf("(*Engine).%s serves no role of engineRoles: add it to the role it serves (and to that consumer's interface), or unexport it", m)
		}
	}
	for m, role := range listed {
		if !slices.Contains(have, m) {
			t.Errorf("role %s lists %s, which *Engine does not have", role, m)
		}
	}
	t.Logf("*Engine has %d exported methods", len(have))
}

// TestConsumersUseTheirOwnInterfaces fails when a package other than the
// one that builds the engine (internal/app) names *engine.Engine outside
// its tests: each consumer depends on the small interface it defines.
func TestConsumersUseTheirOwnInterfaces(t *testing.T) {
	const enginePath = "github.com/statefun-go/statefun/internal/engine"
	root := filepath.Join("..", "..")
	allowed := map[string]bool{filepath.Join(root, "internal", "engine"): true, filepath.Join(root, "internal", "app"): true}
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (allowed[path] || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		name := ""
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); p == enginePath {
				name = "engine"
				if im.Name != nil {
					name = im.Name.Name
				}
			}
		}
		if name == "" {
			return nil
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Engine" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == name {
					t.Errorf("%s names %s.Engine: define the small interface it uses where it uses it", fset.Position(sel.Pos()), name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no package outside internal/engine imports it: the walk went wrong")
	}
}
