// Package e2e runs the statefun binary as a separate process against
// functions built with the official SDKs, over real HTTP.
package e2e

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/statefun-go/statefun/internal/testport"
)

// binary is the statefun binary built once for the package's tests.
var binary string

var flagRace = flag.Bool("e2e.race", true, "build the runtime under test with the race detector; false for figures of memory and speed (the default when -test.bench is given)")

// raceBuild reports whether the runtime under test is built with the race
// detector: as -e2e.race says when it is given, else for tests but not
// for a benchmark run (-test.bench), whose figures must be the runtime's
// as users run it, not the race detector's.
func raceBuild() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "e2e.race" })
	if set {
		return *flagRace
	}
	if b := flag.Lookup("test.bench"); b != nil && b.Value.String() != "" {
		return false
	}
	return *flagRace
}

func TestMain(m *testing.M) {
	// The official Go SDK logs every negotiation through the log package.
	log.SetOutput(io.Discard)
	dir, err := os.MkdirTemp("", "statefun-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "statefun")
	flag.Parse()
	args := []string{"build", "-o", binary}
	if raceBuild() {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/statefun-go/statefun/cmd/statefun")...)
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building statefun:", err)
		os.Exit(1)
	}
	code := m.Run()
	stopSharedKafka()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t testing.TB) int {
	t.Helper()
	p, err := testport.Free()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
