package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/app"
)

func TestMain(m *testing.M) {
	// The official Go SDK logs every registration through the log package.
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// t0 is the fixed time of the tests' clock.
var t0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

// clock is a test clock the functions read and the test moves.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(t0.UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// example is the whole example running in this test: a kfake cluster of
// three brokers, the functions served over real HTTP, and the runtime
// (internal/app, as `statefun run` starts it) on a fresh store, with one of
// the example's module files whose addresses are pointed at them.
type example struct {
	brokers []string
	clock   *clock
}

func startExample(t *testing.T, moduleFile, loginsTopic string) *example {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, loginsTopic, GreetingsTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	ex := &example{brokers: cluster.ListenAddrs(), clock: newClock()}

	fn := httptest.NewServer(newMux(Functions{Now: ex.clock.now}))
	t.Cleanup(fn.Close)

	src, err := os.ReadFile(moduleFile)
	if err != nil {
		t.Fatal(err)
	}
	// Only the addresses change: the endpoint's host and the brokers.
	mod := string(src)
	if n := strings.Count(mod, "urlPathTemplate: http://localhost:8000/statefun"); n != 1 {
		t.Fatalf("%s names the function endpoint %d times, want once", moduleFile, n)
	}
	if n := strings.Count(mod, "address: 127.0.0.1:9092"); n != 2 {
		t.Fatalf("%s names the brokers %d times, want twice (ingress and egress)", moduleFile, n)
	}
	mod = strings.ReplaceAll(mod, "urlPathTemplate: http://localhost:8000/statefun", "urlPathTemplate: "+fn.URL+"/statefun")
	mod = strings.ReplaceAll(mod, "address: 127.0.0.1:9092", "address: "+strings.Join(ex.brokers, ","))
	dir := t.TempDir()
	path := filepath.Join(dir, "module.yaml")
	if err := os.WriteFile(path, []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := app.Start(app.Config{ModulePath: path, DataDir: filepath.Join(dir, "data"), AdminAddr: "127.0.0.1:0",
		ListenHost: "127.0.0.1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	waitReady(t, "http://"+a.Addr("admin")+"/readyz")
	return ex
}

// waitReady waits for /readyz to answer 200: the store is open and the
// Kafka ingress and egress reach their brokers.
func waitReady(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("runtime not ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// greetings reads the greetings topic read_committed from the start until
// it holds n records, then checks for half a second that no more arrive,
// and returns each user's greetings in order.
func (ex *example) greetings(t *testing.T, n int) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Consume(ctx, ex.brokers, GreetingsTopic, n, func(k, v string) { got[k] = append(got[k], v) }); err != nil {
		t.Fatalf("%v; got %q", err, got)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	extra := 0
	_ = Consume(ctx, ex.brokers, GreetingsTopic, n+1, func(string, string) { extra++ })
	if extra > n {
		t.Errorf("the greetings topic holds %d records, want %d", extra, n)
	}
	return got
}

// wantFirstRound is what users see for logins.jsonl, all at t0.
var wantFirstRound = map[string][]string{
	"bid": {
		"Welcome Bob! This is your first login via web.",
		"Nice to see you again, Bob (login 2 via mobile).",
		"Third time is a charm, Bob (login 3 via web).",
		"Welcome back Bob: login 4 via web, 0s after the last one; first seen 2026-03-01T08:00:00Z.",
	},
	"jid": {
		"Welcome Joe! This is your first login via mobile.",
		"Nice to see you again, Joe (login 2 via web).",
	},
	"aid": {"Welcome Alice! This is your first login via web."},
}

// TestGreetingsFromKafka runs the example with its own module.yaml: the
// logins of logins.jsonl, produced by the example's Go producer, come back
// as one greeting per login on the greetings topic, keyed by user, read
// read_committed; each user's login count goes up by one per login and the
// time since the last login is kept in the user's state; a record that is
// not a login is skipped.
func TestGreetingsFromKafka(t *testing.T) {
	ex := startExample(t, "module.yaml", "user-logins")
	f, err := os.Open("logins.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := ProduceLogins(context.Background(), ex.brokers, "user-logins", f)
	if err != nil || n != 7 {
		t.Fatalf("produced %d logins (%v), want 7", n, err)
	}
	if got := ex.greetings(t, 7); !reflect.DeepEqual(got, wantFirstRound) {
		t.Errorf("greetings\n got %q\nwant %q", got, wantFirstRound)
	}

	// A record that is not a login is skipped by the user function; it
	// neither counts nor holds up Bob's next login.
	cl, err := kgo.NewClient(kgo.SeedBrokers(ex.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "user-logins", Key: []byte("bid"), Value: []byte("not json")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ex.clock.advance(90 * time.Second)
	if _, err := ProduceLogins(context.Background(), ex.brokers, "user-logins",
		strings.NewReader(`{"user_id": "bid", "user_name": "Bob", "login_type": "MOBILE"}`)); err != nil {
		t.Fatal(err)
	}
	want := append(wantFirstRound["bid"][:4:4],
		"Welcome back Bob: login 5 via mobile, 1m30s after the last one; first seen 2026-03-01T08:00:00Z.")
	if got := ex.greetings(t, 8)["bid"]; !reflect.DeepEqual(got, want) {
		t.Errorf("Bob's greetings\n got %q\nwant %q", got, want)
	}
}

// TestShowcaseModule runs the example with module-showcase.yaml, the
// playground showcase's module with only its addresses changed (topic
// logins, its ingress id and consumer group, maxNumBatchRequests, a 15min
// transaction timeout). Where kcat is installed, it produces the logins
// and reads the greetings with the very commands of run.sh — a non-Go
// Kafka client, reading read_committed.
func TestShowcaseModule(t *testing.T) {
	ex := startExample(t, "module-showcase.yaml", "logins")
	brokers := strings.Join(ex.brokers, ",")
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Log("kcat is not installed; the Go producer and consumer stand in")
		f, err := os.Open("logins.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := ProduceLogins(context.Background(), ex.brokers, "logins", f); err != nil {
			t.Fatal(err)
		}
		if got := ex.greetings(t, 7); !reflect.DeepEqual(got, wantFirstRound) {
			t.Errorf("greetings\n got %q\nwant %q", got, wantFirstRound)
		}
		return
	}
	// run.sh: key each line by its user_id, produce with kcat.
	produce := exec.Command("bash", "-c", `set -o pipefail; sed -E 's/.*"user_id" *: *"([^"]*)".*/\1|&/' logins.jsonl | "$KCAT" -P -b "$BROKERS" -t logins -K '|'`)
	produce.Env = append(os.Environ(), "KCAT="+kcat, "BROKERS="+brokers)
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v: %s", err, out)
	}
	consume := exec.Command(kcat, "-C", "-b", brokers, "-t", GreetingsTopic, "-X", "isolation.level=read_committed",
		"-o", "beginning", "-c", "7", "-q", "-f", `%k: %s\n`)
	done := make(chan struct{})
	timer := time.AfterFunc(30*time.Second, func() {
		select {
		case <-done:
		default:
			_ = consume.Process.Kill()
		}
	})
	out, err := consume.Output()
	close(done)
	timer.Stop()
	if err != nil {
		t.Fatalf("kcat -C: %v: %s", err, out)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	var want []string
	for k, gs := range wantFirstRound {
		for _, g := range gs {
			want = append(want, k+": "+g)
		}
	}
	// kcat interleaves the partitions; each user's greetings keep their
	// order within the user's partition, checked by the Go consumer below.
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("kcat read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := ex.greetings(t, 7); !reflect.DeepEqual(got, wantFirstRound) {
		t.Errorf("greetings\n got %q\nwant %q", got, wantFirstRound)
	}
}

func TestProduceLoginsRefusesBadLines(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{\"user_id\": \"bid\"}\nnot json\n", "line 2: not a login"},
		{"\n{\"user_name\": \"Bob\"}\n", "line 2: user_id is missing or empty"},
	} {
		// No broker is contacted before the whole input is read.
		_, err := ProduceLogins(context.Background(), []string{"127.0.0.1:1"}, "user-logins", strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ProduceLogins(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func TestGreetingTexts(t *testing.T) {
	for _, tc := range []struct {
		p    UserProfile
		want string
	}{
		{UserProfile{Name: "Ann", SeenCount: 1}, "Welcome Ann! This is your first login."},
		{UserProfile{Name: "Ann", LoginType: "web", SeenCount: 2}, "Nice to see you again, Ann (login 2 via web)."},
		{UserProfile{Name: "Ann", LoginType: "web", SeenCount: 12, SinceLastMs: 3_600_500, FirstLoginMs: t0.UnixMilli()},
			"Welcome back Ann: login 12 via web, 1h0m0.5s after the last one; first seen 2026-03-01T08:00:00Z."},
	} {
		if got := Greeting(tc.p); got != tc.want {
			t.Errorf("Greeting(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}
