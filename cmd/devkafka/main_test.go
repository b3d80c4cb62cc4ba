package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// start runs devkafka in process with args and returns its bootstrap
// servers, its log and a stop function that returns its exit code.
func start(t *testing.T, args ...string) (string, *bytes.Buffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var log bytes.Buffer
	code := make(chan int, 1)
	go func() {
		// log is read only after the run has returned.
		code <- run(ctx, args, pw, &log)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("devkafka printed no bootstrap line (exit %d): %v\n%s", <-code, err, log.String())
	}
	go io.Copy(io.Discard, pr)
	var once sync.Once
	exit := 0
	stop := func() int {
		once.Do(func() { cancel(); exit = <-code })
		return exit
	}
	t.Cleanup(func() { stop() })
	return strings.TrimSpace(line), &log, stop
}

func newClient(t *testing.T, boot string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(boot, ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeAll reads n records of topic from the start, read_committed.
func consumeAll(t *testing.T, boot, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, boot, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("after %d of %d records: %v", len(out), n, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// TestServesKafka: three brokers on loopback, a seeded topic, a
// transactional produce visible to a read_committed consumer.
func TestServesKafka(t *testing.T) {
	boot, log, stop := start(t, "-port", "0", "-brokers", "3", "-topic", "in:2")
	if addrs := strings.Split(boot, ","); len(addrs) != 3 || !strings.HasPrefix(addrs[0], "127.0.0.1:") {
		t.Fatalf("bootstrap = %q, want three loopback brokers", boot)
	}
	adm := newClient(t, boot)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, adm)
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Brokers) != 3 {
		t.Errorf("metadata lists %d brokers", len(meta.Brokers))
	}

	p := newClient(t, boot, kgo.TransactionalID("devkafka-test"))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte(k), Value: []byte("v-" + k)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range consumeAll(t, boot, "in", 3) {
		got[string(r.Key)] = string(r.Value)
	}
	if len(got) != 3 || got["b"] != "v-b" {
		t.Errorf("read back %v", got)
	}
	if code := stop(); code != 0 {
		t.Errorf("exit code %d", code)
	}
	if !strings.Contains(log.String(), "DEVELOPMENT AND TEST BROKER") {
		t.Errorf("the log does not say it is a development broker:\n%s", log.String())
	}
}

// TestDataDir: with -data-dir, records survive a restart.
func TestDataDir(t *testing.T) {
	dir := t.TempDir()
	boot, _, stop := start(t, "-port", "0", "-brokers", "1", "-data-dir", dir, "-sync", "-topic", "kept:1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := newClient(t, boot).ProduceSync(ctx, &kgo.Record{Topic: "kept", Value: []byte("still here")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	boot, _, _ = start(t, "-port", "0", "-brokers", "1", "-data-dir", dir)
	if recs := consumeAll(t, boot, "kept", 1); string(recs[0].Value) != "still here" {
		t.Errorf("after a restart: %q", recs[0].Value)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-brokers", "0"}, "-brokers 0: want 1 to 64"},
		{[]string{"-port", "65535", "-brokers", "2"}, "the brokers' ports must be 1 to 65535"},
		{[]string{"-topic", "x:none"}, `-topic "x:none": want NAME or NAME:PARTITIONS`},
		{[]string{"-sync"}, "-sync needs -data-dir"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-control", "0.0.0.0:9080"}, "the control listener must be on loopback"},
		{[]string{"-control", "9080"}, `-control "9080": want host:port`},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestKcat: Debian's kcat (librdkafka), a real non-Go client, produces to
// devkafka running as its own process and reads back read_committed.
func TestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (apt-get install kcat); skipping the non-Go client test")
	}
	bin := filepath.Join(t.TempDir(), "devkafka")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-port", "0", "-brokers", "3", "-topic", "names:3")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no bootstrap line: %v\n%s", err, stderr.String())
	}
	boot := strings.TrimSpace(line)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := exec.CommandContext(ctx, kcat, "-P", "-b", boot, "-t", "names", "-K", ":")
	prod.Stdin = strings.NewReader("alice:hello alice\nbob:hello bob\ncarol:hello carol\n")
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	cons := exec.CommandContext(ctx, kcat, "-C", "-b", boot, "-t", "names", "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%k=%s\n")
	out, err := cons.Output()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, out)
	}
	got := strings.Fields(strings.ReplaceAll(string(out), " ", "_"))
	want := map[string]bool{"alice=hello_alice": true, "bob=hello_bob": true, "carol=hello_carol": true}
	if len(got) != 3 {
		t.Fatalf("kcat read %q", out)
	}
	for _, g := range got {
		if !want[g] {
			t.Errorf("kcat read %q", out)
		}
	}
	// A Go client sees kcat's records too.
	if recs := consumeAll(t, boot, "names", 3); len(recs) != 3 {
		t.Errorf("kgo read %d records", len(recs))
	}
}
