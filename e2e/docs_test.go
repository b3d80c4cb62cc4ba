package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// docFiles are the Markdown files whose marked blocks run
// (docs/explanation/testing.md, "Docs that are tested"), as globs relative to the
// repository.
var docFiles = []string{"README.md", "docs/tutorials/*.md"}

// docsTested are the files that must keep blocks marked for a scenario:
// a page whose markers were dropped would pass with nothing run.
var docsTested = map[string]string{
	"README.md":                  "greeter",
	"docs/tutorials/greeter.md":  "greeter",
	"docs/tutorials/incident.md": "greeter",
	"docs/tutorials/kafka.md":    "kafka",
	"docs/tutorials/cluster.md":  "cluster",
}

// TestDocs runs the commands of the marked blocks of the README and the
// tutorials in order against the real binary, each file's scenario in an
// environment of its own, started as the page says (make example, make
// example-cluster): a line that stops working, or whose shown output is no
// longer what the binary prints, fails here with the file and line.
func TestDocs(t *testing.T) {
	type run struct{ file, scenario string }
	byRun := map[run][]docBlock{}
	var order []run
	for _, g := range docFiles {
		files, err := filepath.Glob(filepath.Join("..", g))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			f := filepath.ToSlash(strings.TrimPrefix(path, ".."+string(filepath.Separator)))
			blocks, err := readDocBlocks(path, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range blocks {
				if _, ok := docScenarios[b.scenario]; !ok {
					t.Errorf("%s: no scenario %q in e2e/docs_test.go", b, b.scenario)
					continue
				}
				r := run{f, b.scenario}
				if byRun[r] == nil {
					order = append(order, r)
				}
				byRun[r] = append(byRun[r], b)
			}
		}
	}
	for f, scenario := range docsTested {
		if len(byRun[run{f, scenario}]) == 0 {
			t.Errorf("%s has no block marked <!-- test: %s -->", f, scenario)
		}
	}
	for _, r := range order {
		t.Run(r.file+":"+r.scenario, func(t *testing.T) {
			t.Parallel()
			env := docScenarios[r.scenario](t)
			for _, b := range byRun[r] {
				if !env.runBlock(t, b) {
					return // later blocks build on this one
				}
			}
		})
	}
}

// docScenarios start what a scenario's blocks expect to be running, in a
// scratch directory.
var docScenarios = map[string]func(t *testing.T) *docEnv{
	"greeter": startGreeterExample,
	"kafka":   startKafkaExample,
	"cluster": startClusterExample,
}

// docEnv is where a scenario's commands run: the scratch directory, the
// environment, and the ports the doc names mapped to the free ones used.
type docEnv struct {
	dir   string
	env   []string
	ports map[int]int // doc's port → the port used
	caps  map[string]string
	logs  func() string
}

// startGreeterExample does what "make example" does, through the
// example's own run.sh and module.yaml, on free ports: the greeter
// function (doc port 8000), the playground ingress (8090) and egress
// (8091), the admin listener (8070). The scratch directory has
// bin/statefun and bin/greeter, as a checkout after "make build" does.
func startGreeterExample(t *testing.T) *docEnv {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(bin, "statefun")); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "greeter"), "github.com/statefun-go/statefun/examples/greeter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the greeter: %v\n%s", err, out)
	}
	e := &docEnv{dir: dir, ports: map[int]int{}, caps: map[string]string{}}
	for _, p := range []int{8000, 8090, 8091, 8070} {
		e.ports[p] = freePort(t)
	}
	mod, err := os.ReadFile("../examples/greeter/module.yaml")
	if err != nil {
		t.Fatal(err)
	}
	module := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(module, []byte(e.toUsed(string(mod))), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf("127.0.0.1:%d", e.ports[8070])
	e.env = append(os.Environ(),
		"STATEFUN_SERVER=http://"+admin, // the CLI's --server, default 127.0.0.1:8070
		"EDITOR=", "VISUAL=",
	)
	run := exec.Command("./examples/greeter/run.sh")
	run.Dir = ".."
	run.Env = append(os.Environ(),
		"BIN_DIR="+bin,
		fmt.Sprintf("GREETER_ADDR=127.0.0.1:%d", e.ports[8000]),
		"STATEFUN_MODULE="+module,
		"STATEFUN_DATA_DIR="+filepath.Join(dir, "data", "greeter"),
		"STATEFUN_ADMIN_ADDR="+admin,
	)
	var logs syncBuffer
	run.Stdout, run.Stderr = &logs, &logs
	e.logs = logs.String
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // run.sh and its two children
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { run.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-run.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("examples/greeter/run.sh stopped:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the greeter example is not ready after 60s:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return e
}

// toUsed replaces the doc's ports in s by the ports used.
func (e *docEnv) toUsed(s string) string {
	for doc, used := range e.ports {
		s = strings.ReplaceAll(s, ":"+strconv.Itoa(doc), ":"+strconv.Itoa(used))
		s = strings.ReplaceAll(s, "port: "+strconv.Itoa(doc), "port: "+strconv.Itoa(used))
	}
	return s
}

// toDoc replaces the ports used in s by the doc's.
func (e *docEnv) toDoc(s string) string {
	for doc, used := range e.ports {
		s = strings.ReplaceAll(s, ":"+strconv.Itoa(used), ":"+strconv.Itoa(doc))
	}
	return s
}

// runBlock runs a block's commands in order; false after the first that
// fails, which is reported with its file and line.
func (e *docEnv) runBlock(t *testing.T, b docBlock) bool {
	t.Helper()
	for _, c := range b.cmds {
		cmd := c.text
		for _, name := range captureRe.FindAllString(cmd, -1) {
			v, ok := e.caps[name]
			if !ok {
				t.Errorf("%s:%d: %s: no earlier output of the scenario shows %s", b.file, c.line, c.text, name)
				return false
			}
			cmd = strings.ReplaceAll(cmd, name, v)
		}
		cmd = e.toUsed(cmd)
		t.Logf("%s:%d: %s", b.file, c.line, c.text)
		deadline := time.Now().Add(15 * time.Second)
		first := "" // what the first attempt printed: a retried read may have popped it
		for attempt := 1; ; attempt++ {
			stdout, stderr, err := e.run(cmd)
			out := e.toDoc(stdout)
			if attempt == 1 {
				first = out
			}
			var caps map[string]string
			ok := err == nil
			if ok && c.want != nil {
				caps, ok = matchOutput(c.want, out)
			}
			if ok {
				for k, v := range caps {
					e.caps[k] = v
				}
				if out != "" {
					t.Logf("%s:%d: printed:\n%s", b.file, c.line, out) // with -v: the output to copy into the doc
				}
				break
			}
			// A read that waits on the runtime may also fail until then
			// (grep finding no line yet exits 1).
			if b.retry && c.want != nil && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			var msg strings.Builder
			fmt.Fprintf(&msg, "%s:%d: %s\n", b.file, c.line, c.text)
			if err != nil {
				fmt.Fprintf(&msg, "failed (%v)", err)
			} else {
				fmt.Fprintf(&msg, "printed what the doc does not show (attempt %d)", attempt)
			}
			if attempt > 1 && first != out {
				fmt.Fprintf(&msg, "\n--- the first attempt printed:\n%s", first)
			}
			fmt.Fprintf(&msg, "\n--- it printed:\n%s\n--- on stderr:\n%s\n", out, e.toDoc(stderr))
			if c.want != nil {
				fmt.Fprintf(&msg, "--- the doc shows:\n%s\n", strings.Join(c.want, "\n"))
			}
			fmt.Fprintf(&msg, "--- the processes' logs:\n%s", e.logs())
			t.Error(msg.String())
			return false
		}
	}
	return true
}

// run runs one command line with bash in the scratch directory.
func (e *docEnv) run(cmd string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmd)
	c.Dir, c.Env = e.dir, e.env
	var o, eb bytes.Buffer
	c.Stdout, c.Stderr = &o, &eb
	err = c.Run()
	return o.String(), eb.String(), err
}

// syncBuffer collects the output of processes that write from their own
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
