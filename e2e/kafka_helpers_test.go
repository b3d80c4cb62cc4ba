package e2e

// Helpers of the Kafka end-to-end tests: a Kafka-protocol cluster (kfake in
// the test process, or cmd/devkafka as a process of its own), Debian's kcat
// as a non-Go client, an official-Go-SDK counter that writes to a Kafka
// egress, module.yaml documents, and the admin listener's answers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/flink-statefun/statefun-sdk-go/v3/pkg/statefun"
	"github.com/twmb/franz-go/pkg/kfake"
)

// kafkaCount is the state of kc/counter (io.statefun.types/long).
var kafkaCount = statefun.ValueSpec{Name: "count", ValueType: statefun.Int64Type}

// kafkaArmed is the state of kc/delay: the delayed messages it sent.
var kafkaArmed = statefun.ValueSpec{Name: "armed", ValueType: statefun.Int64Type}

// kafkaDelay is the delay of the messages kc/delay sends.
const kafkaDelay = 10 * time.Second

// kafkaCounterFn serves kc/counter with the official Go SDK: each message
// adds one to its count and sends "<id>=<count>" with KafkaEgressBuilder to
// the Kafka egress `egress`, topic "counts", keyed by the function id.
// Messages are raw text (type kc/text, as the Kafka ingress passes a
// record's value). The message text "nokey" sends the record with an empty key instead,
// "badvalue" sends a plain string (not a KafkaProducerRecord) to the egress, and "missing"
// sends it to topic "no-such-topic".
//
// It serves kc/delay too: each message to kc/delay/<id> sends one message
// to kc/counter/<id> with SendAfter, kafkaDelay later (the same id, so the
// same partition), and counts it in its state "armed".
func kafkaCounterFn(t testing.TB, egress string) string {
	b := statefun.StatefulFunctionsBuilder()
	err := b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("kc/delay"),
		States:       []statefun.ValueSpec{kafkaArmed},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int64
			ctx.Storage().Get(kafkaArmed, &n)
			ctx.Storage().Set(kafkaArmed, n+1)
			ctx.SendAfter(kafkaDelay, statefun.MessageBuilder{
				Target:    statefun.Address{FunctionType: statefun.TypeNameFrom("kc/counter"), Id: ctx.Self().Id},
				Value:     "delayed",
				ValueType: statefun.StringType,
			})
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	err = b.WithSpec(statefun.StatefulFunctionSpec{
		FunctionType: statefun.TypeNameFrom("kc/counter"),
		States:       []statefun.ValueSpec{kafkaCount},
		Function: statefun.StatefulFunctionPointer(func(ctx statefun.Context, msg statefun.Message) error {
			var n int64
			ctx.Storage().Get(kafkaCount, &n)
			n++
			ctx.Storage().Set(kafkaCount, n)
			text := string(msg.RawValue())
			id := ctx.Self().Id
			switch text {
			case "badvalue":
				ctx.SendEgress(statefun.GenericEgressBuilder{
					Target:    statefun.TypeNameFrom(egress),
					Value:     "not a KafkaProducerRecord",
					ValueType: statefun.StringType,
				})
				return nil
			case "nokey":
				id = ""
			}
			topic := "counts"
			if text == "missing" {
				topic = "no-such-topic"
			}
			ctx.SendEgress(statefun.KafkaEgressBuilder{
				Target: statefun.TypeNameFrom(egress),
				Topic:  topic,
				Key:    id,
				Value:  []byte(fmt.Sprintf("%s=%d", ctx.Self().Id, n)),
			})
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b.AsHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// kafkaModule is the module.yaml of the Kafka tests: functions kc/* at
// fnURL, a playground ingress on port in and egress on out (topic "pg"),
// the Kafka ingress kc/in (group "kc", topic "in" → kc/counter, from the
// earliest offset) and the Kafka egress kc/out with the given delivery
// semantic. ingressProps are extra property lines of the ingress
// ("key: value").
func kafkaModule(fnURL, brokers, semantic string, in, out int, ingressProps ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `kind: io.statefun.endpoints.v2/http
spec:
  functions: kc/*
  urlPathTemplate: %s
  transport:
    type: io.statefun.transports.v1/async
    call: 5s
---
kind: io.statefun.playground.v1/ingress
spec:
  port: %d
---
kind: io.statefun.playground.v1/egress
spec:
  port: %d
  topics: [pg]
---
kind: io.statefun.kafka.v1/ingress
spec:
  id: kc/in
  address: %s
  consumerGroupId: kc
  startupPosition:
    type: earliest
  topics:
    - topic: in
      valueType: kc/text
      targets: [kc/counter]
`, fnURL, in, out, brokers)
	if len(ingressProps) > 0 {
		b.WriteString("  properties:\n")
		for _, p := range ingressProps {
			fmt.Fprintf(&b, "    - %s\n", p)
		}
	}
	fmt.Fprintf(&b, `---
kind: io.statefun.kafka.v1/egress
spec:
  id: kc/out
  address: %s
  deliverySemantic:
    type: %s
`, brokers, semantic)
	if semantic == "exactly-once" {
		b.WriteString("    transactionTimeout: 10s\n")
	}
	return b.String()
}

// kafkaCluster is an in-process kfake cluster of three brokers with the
// topics "in" (4 partitions) and "counts" (3), closed when t ends.
func kafkaCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(4, "in"), kfake.SeedTopics(3, "counts")}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func brokersOf(c *kfake.Cluster) string { return strings.Join(c.ListenAddrs(), ",") }

// kcat is Debian's kcat (librdkafka), a Kafka client not written in Go.
const kcat = "/usr/bin/kcat"

func needKcat(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(kcat); err != nil {
		t.Skip("kcat is not installed (apt-get install kcat)")
	}
}

// kcatProduce produces lines ("key:value"; a line without ':' has a null
// key) to topic with kcat and waits until kcat has delivered them all.
func kcatProduce(t testing.TB, brokers, topic string, lines ...string) {
	t.Helper()
	cmd := exec.Command(kcat, "-P", "-b", brokers, "-t", topic, "-K:")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
}

// kcatStream is a kcat producer fed line by line.
type kcatStream struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	w     *bufio.Writer
	out   bytes.Buffer
	count map[string]int // records written per key
}

func newKcatStream(t testing.TB, brokers, topic string) *kcatStream {
	t.Helper()
	s := &kcatStream{count: map[string]int{}}
	s.cmd = exec.Command(kcat, "-P", "-b", brokers, "-t", topic, "-K:", "-X", "linger.ms=5")
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
	s.w = bufio.NewWriter(s.in)
	return s
}

func (s *kcatStream) send(key, value string) error {
	s.count[key]++
	if _, err := fmt.Fprintf(s.w, "%s:%s\n", key, value); err != nil {
		return err
	}
	return s.w.Flush()
}

// close ends the input and waits for kcat to deliver everything.
func (s *kcatStream) close(t testing.TB) {
	t.Helper()
	s.w.Flush()
	s.in.Close()
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, s.out.String())
	}
	if strings.Contains(s.out.String(), "Delivery failed") {
		t.Fatalf("kcat -P could not deliver every record:\n%s", s.out.String())
	}
}

// kcatRecord is one record as kcat -J prints it.
type kcatRecord struct {
	Topic     string  `json:"topic"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
	Key       *string `json:"key"`
	Payload   *string `json:"payload"`
}

func (r kcatRecord) String() string {
	k, v := "<null>", "<null>"
	if r.Key != nil {
		k = strconv.Quote(*r.Key)
	}
	if r.Payload != nil {
		v = *r.Payload
	}
	return fmt.Sprintf("%s/%d@%d %s=%s", r.Topic, r.Partition, r.Offset, k, v)
}

// kcatRead reads topic from the beginning to its end as a read_committed
// consumer sees it (up to the last stable offset).
func kcatRead(t testing.TB, brokers, topic string) []kcatRecord {
	t.Helper()
	cmd := exec.Command(kcat, "-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-J", "-q",
		"-X", "isolation.level=read_committed")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat -C %s: %v\n%s", topic, err, stderr.String())
	}
	var recs []kcatRecord
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("kcat -J printed %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// kcatReadUntil reads topic (read_committed) until it holds at least n
// records or timeout passes, and returns what it last read.
func kcatReadUntil(t testing.TB, brokers, topic string, n int, timeout time.Duration) []kcatRecord {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		recs := kcatRead(t, brokers, topic)
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// payloads are the values of recs.
func payloads(recs []kcatRecord) []string {
	var out []string
	for _, r := range recs {
		if r.Payload != nil {
			out = append(out, *r.Payload)
		}
	}
	return out
}

// startWhen launches the process with 8 partitions and waits until
// /readyz answers so that ok(status, body) holds (start waits for 200; a
// runtime whose Kafka is unreachable answers 503).
func (r *runtime) startWhen(ok func(status int, body string) bool) {
	r.t.Helper()
	r.startArgs(ok, "--partitions", "8")
}

// readyz is the admin listener's answer to GET /readyz.
func (r *runtime) readyz() (int, string, error) {
	resp, err := http.Get("http://" + r.admin + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// waitReadyz polls /readyz until ok holds and returns the last body.
func (r *runtime) waitReadyz(what string, timeout time.Duration, ok func(status int, body string) bool) string {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		status, body, err := r.readyz()
		if err == nil && ok(status, body) {
			return body
		}
		last = fmt.Sprintf("%d %s (%v)", status, body, err)
		if time.Now().After(deadline) {
			r.t.Fatalf("/readyz after %v: %s; want %s", timeout, last, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// counter reads kc/counter/<id>'s count through the state API: the value,
// or -1 when the entry is empty.
func (r *runtime) counter(id string) (int64, error) { return r.stateInt("kc/counter", id, "count") }

// stateInt reads an integer state of fnType/<id> through the state API:
// the value, or -1 when the entry is empty.
func (r *runtime) stateInt(fnType, id, state string) (int64, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+r.admin+"/state/"+fnType+"/"+url.PathEscape(id)+"/"+state, nil)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	case http.StatusNotFound:
		return -1, nil
	default:
		return 0, fmt.Errorf("GET state %s of %s/%s: %s: %s", state, fnType, id, resp.Status, b)
	}
}

// waitCounters waits until every kc/counter in want has its count, and
// fails with the differences otherwise.
func (r *runtime) waitCounters(want map[string]int, timeout time.Duration) {
	r.t.Helper()
	r.waitStates("kc/counter", "count", want, timeout)
}

// waitStates waits until the integer state of every fnType/<id> in want
// has its value, and fails with the differences otherwise.
func (r *runtime) waitStates(fnType, state string, want map[string]int, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var wrong []string
		for id, n := range want {
			got, err := r.stateInt(fnType, id, state)
			if err != nil {
				r.t.Fatal(err)
			}
			if got != int64(n) {
				wrong = append(wrong, fmt.Sprintf("%s=%d (want %d)", id, got, n))
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after %v, %d counters are wrong: %s", timeout, len(wrong), strings.Join(first(wrong, 20), ", "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}

// metric sums the samples of a Prometheus metric on /metrics whose labels
// contain every fragment in labels (e.g. `reason="null-key"`).
func (r *runtime) metric(name string, labels ...string) (float64, error) {
	resp, err := http.Get("http://" + r.admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// waitLog waits until a line of the runtime's log has every fragment.
func (r *runtime) waitLog(timeout time.Duration, fragments ...string) string {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if line, ok := badLogLine(badFullLog(r), fragments); ok {
			return line
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no log line with all of %q after %v", fragments, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// devkafka is cmd/devkafka running as a process of its own.
type devkafka struct {
	t       testing.TB
	args    []string
	cmd     *exec.Cmd
	exited  chan struct{}
	brokers string
	stderr  bytes.Buffer
}

var (
	devkafkaOnce sync.Once
	devkafkaBin  string
	devkafkaErr  error
)

// devkafkaBinary builds cmd/devkafka once, beside the statefun binary.
func devkafkaBinary(t testing.TB) string {
	t.Helper()
	devkafkaOnce.Do(func() {
		devkafkaBin = filepath.Join(filepath.Dir(binary), "devkafka")
		out, err := exec.Command("go", "build", "-o", devkafkaBin, "github.com/statefun-go/statefun/cmd/devkafka").CombinedOutput()
		if err != nil {
			devkafkaErr = fmt.Errorf("building devkafka: %v\n%s", err, out)
		}
	})
	if devkafkaErr != nil {
		t.Fatal(devkafkaErr)
	}
	return devkafkaBin
}

// startDevkafka runs devkafka with args and waits for its bootstrap line.
func startDevkafka(t testing.TB, args ...string) *devkafka {
	t.Helper()
	d := &devkafka{t: t, args: args}
	d.start()
	t.Cleanup(func() {
		d.kill()
		if t.Failed() {
			t.Logf("devkafka stderr:\n%s", d.stderr.String())
		}
	})
	return d
}

func (d *devkafka) start() {
	d.t.Helper()
	d.cmd = exec.Command(devkafkaBinary(d.t), d.args...)
	d.cmd.Stderr = &d.stderr
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		d.t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	line, drained := make(chan string, 1), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
		close(line)
		close(drained)
	}()
	d.exited = make(chan struct{})
	// Wait only once stdout is drained, as StdoutPipe requires.
	go func(c *exec.Cmd, done chan struct{}) { <-drained; c.Wait(); close(done) }(d.cmd, d.exited)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case l, ok := <-line:
		if !ok {
			d.t.Fatalf("devkafka exited without printing its brokers:\n%s", d.stderr.String())
		}
		d.brokers = strings.TrimSpace(l)
	case <-ctx.Done():
		d.t.Fatalf("devkafka printed no brokers within 30s:\n%s", d.stderr.String())
	}
}

// kill stops devkafka with SIGKILL (a broker that dies) and waits.
func (d *devkafka) kill() { d.signal(syscall.SIGKILL) }

// stop stops devkafka with SIGTERM (a broker shut down) and waits.
func (d *devkafka) stop() { d.signal(syscall.SIGTERM) }

func (d *devkafka) signal(sig syscall.Signal) {
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Signal(sig)
	<-d.exited
	d.cmd = nil
}

// checkEffects asserts that out, an output topic of "<id>=<count>"
// records, holds every count from 1 to want[id] of every id exactly once
// and nothing else: no gap, no duplicate. A record's key is its id, or null
// for the values in nullKey.
func checkEffects(t testing.TB, out []kcatRecord, want map[string]int, nullKey map[string]bool) {
	t.Helper()
	seen := map[string]int{}
	total := 0
	for _, r := range out {
		if r.Payload == nil {
			t.Errorf("output record %v has no value", r)
			continue
		}
		id, _, _ := strings.Cut(*r.Payload, "=")
		switch {
		case nullKey[*r.Payload] && r.Key != nil:
			t.Errorf("output record %v: key %q, want a null key (the function sent an empty key)", r, *r.Key)
		case !nullKey[*r.Payload] && (r.Key == nil || *r.Key != id):
			t.Errorf("output record %v: the key is not the function's id %q", r, id)
		}
		seen[*r.Payload]++
	}
	var dups, gaps []string
	for k, n := range want {
		total += n
		for i := 1; i <= n; i++ {
			v := fmt.Sprintf("%s=%d", k, i)
			switch seen[v] {
			case 0:
				gaps = append(gaps, v)
			case 1:
			default:
				dups = append(dups, fmt.Sprintf("%s ×%d", v, seen[v]))
			}
			delete(seen, v)
		}
	}
	var extra []string
	for v, n := range seen {
		extra = append(extra, fmt.Sprintf("%s ×%d", v, n))
	}
	sort.Strings(gaps)
	sort.Strings(dups)
	sort.Strings(extra)
	if len(gaps) > 0 {
		t.Errorf("%d effects missing from the output topic: %s", len(gaps), strings.Join(first(gaps, 20), ", "))
	}
	if len(dups) > 0 {
		t.Errorf("%d effects on the output topic more than once: %s", len(dups), strings.Join(first(dups, 20), ", "))
	}
	if len(extra) > 0 {
		t.Errorf("%d effects on the output topic that no input caused: %s", len(extra), strings.Join(first(extra, 20), ", "))
	}
	if len(out) != total {
		t.Errorf("%d records on the output topic (read_committed), want %d", len(out), total)
	}
}
