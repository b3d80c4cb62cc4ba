package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startClusterExample does what "make example-cluster" does, through
// examples/cluster/run.sh, on free ports: devkafka (doc port 9092), the
// kafka-greeter functions (8000) and three nodes in cluster mode (admin
// listeners 8071, 8072, 8073). The scratch directory has bin/ and a link
// to the repository's examples/, so that the tutorial's commands
// (examples/cluster/node.sh, data/cluster/node-c.pid) run there as in a
// checkout. At the end it stops run.sh as Ctrl-C does and checks that no
// process it started is left.
func startClusterExample(t *testing.T) *docEnv {
	needTools(t, "kcat", "jq")
	dir := exampleDir(t)
	e := &docEnv{dir: dir, ports: map[int]int{}, caps: map[string]string{}}
	for _, p := range []int{8000, 8071, 8072, 8073} {
		e.ports[p] = freePort(t)
	}
	adminPorts := fmt.Sprintf("%d %d %d", e.ports[8071], e.ports[8072], e.ports[8073])
	e.env = append(os.Environ(), "ADMIN_PORTS="+adminPorts, "EDITOR=", "VISUAL=")

	run := exec.Command("./examples/cluster/run.sh")
	run.Dir = dir
	run.Env = append(os.Environ(),
		"DEVKAFKA_PORT=0", // any free ports; the doc's 9092 is mapped below
		fmt.Sprintf("KAFKA_GREETER_ADDR=127.0.0.1:%d", e.ports[8000]),
		"ADMIN_PORTS="+adminPorts,
	)
	var logs syncBuffer
	run.Stdout, run.Stderr = &logs, &logs
	clusterDir := filepath.Join(dir, "data", "cluster")
	e.logs = func() string {
		var b strings.Builder
		b.WriteString(logs.String())
		for _, f := range []string{"node-a.log", "node-b.log", "node-c.log", "devkafka.log", "functions.log"} {
			data, _ := os.ReadFile(filepath.Join(clusterDir, f))
			fmt.Fprintf(&b, "\n--- %s:\n%s", f, tail(string(data), 6000))
		}
		return b.String()
	}
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { run.Wait(); close(done) }()
	t.Cleanup(func() {
		// SIGINT to run.sh, as Ctrl-C in its terminal: it stops the nodes
		// (also one node.sh started since), the functions and devkafka,
		// which run in sessions of their own.
		left := clusterPIDs(clusterDir)
		syscall.Kill(-run.Process.Pid, syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("examples/cluster/run.sh did not stop within 30s of SIGINT")
			syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
			<-done
		}
		for name, pid := range left {
			if syscall.Kill(pid, 0) == nil {
				t.Errorf("%s (pid %d) still runs after run.sh stopped", name, pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})

	// Ready once run.sh printed its hint, after node.sh saw each node ready.
	deadline := time.Now().Add(120 * time.Second)
	for !strings.Contains(logs.String(), "Ctrl-C stops everything.") {
		select {
		case <-done:
			t.Fatalf("examples/cluster/run.sh stopped:\n%s", e.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster example is not ready after 120s:\n%s", e.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	brokers, err := os.ReadFile(filepath.Join(clusterDir, "brokers"))
	if err != nil {
		t.Fatal(err)
	}
	_, port, ok := strings.Cut(strings.TrimSpace(string(brokers)), ":")
	used, err := strconv.Atoi(port)
	if !ok || err != nil {
		t.Fatalf("run.sh wrote brokers %q; want host:port", brokers)
	}
	e.ports[9092] = used
	for _, p := range []int{8071, 8072, 8073} {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", e.ports[p]))
		if err != nil {
			t.Fatalf("node at doc port %d: %v\n%s", p, err, e.logs())
		}
		resp.Body.Close()
	}
	return e
}

// exampleDir is a scratch directory as a checkout after "make build" is
// for the Kafka examples: bin/ with statefun (the binary under test),
// devkafka and kafka-greeter, and a link to the repository's examples/,
// whose scripts change to the directory above theirs.
func exampleDir(t *testing.T) string {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"statefun": binary, "devkafka": devkafkaBinary(t)} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kafka-greeter"), "github.com/statefun-go/statefun/examples/kafka-greeter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the kafka-greeter functions: %v\n%s", err, out)
	}
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(examples, filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// needTools skips a scenario whose page uses a tool this machine lacks
// (.ci/run installs them).
func needTools(t *testing.T, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (apt-get install %s): the page's commands use it", tool, tool)
		}
	}
}

// kcatBrokerRe finds the broker in the commands run.sh prints.
var kcatBrokerRe = regexp.MustCompile(`kcat -P -b 127\.0\.0\.1:(\d+)`)

// startKafkaExample does what "make example-kafka" does, through
// examples/kafka-greeter/run.sh, on free ports: devkafka (doc port 9092),
// the functions (8000) and the runtime's admin listener (8070). Ready
// once run.sh has printed the greetings of its logins.
func startKafkaExample(t *testing.T) *docEnv {
	needTools(t, "kcat")
	dir := exampleDir(t)
	e := &docEnv{dir: dir, ports: map[int]int{}, caps: map[string]string{}}
	for _, p := range []int{8000, 8070} {
		e.ports[p] = freePort(t)
	}
	admin := fmt.Sprintf("127.0.0.1:%d", e.ports[8070])
	e.env = append(os.Environ(), "STATEFUN_SERVER=http://"+admin, "EDITOR=", "VISUAL=")
	run := exec.Command("./examples/kafka-greeter/run.sh")
	run.Dir = dir
	run.Env = append(os.Environ(),
		"DEVKAFKA_PORT=0",
		fmt.Sprintf("KAFKA_GREETER_ADDR=127.0.0.1:%d", e.ports[8000]),
		"STATEFUN_ADMIN_ADDR="+admin,
	)
	var logs syncBuffer
	run.Stdout, run.Stderr = &logs, &logs
	e.logs = logs.String
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // run.sh and its children
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { run.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-run.Process.Pid, syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("examples/kafka-greeter/run.sh did not stop within 30s of SIGINT")
			syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	deadline := time.Now().Add(120 * time.Second)
	for !strings.Contains(logs.String(), "== Everything keeps running") {
		select {
		case <-done:
			t.Fatalf("examples/kafka-greeter/run.sh stopped:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Kafka example is not ready after 120s:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	m := kcatBrokerRe.FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("run.sh printed no kcat command with the broker:\n%s", logs.String())
	}
	e.ports[9092], _ = strconv.Atoi(m[1])
	return e
}

// clusterPIDs reads the pid files the cluster example writes: the nodes,
// the functions and devkafka.
func clusterPIDs(dir string) map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 {
			out[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
		}
	}
	return out
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
