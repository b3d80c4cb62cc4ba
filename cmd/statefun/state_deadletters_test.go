package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/app"
	"github.com/statefun-go/statefun/internal/apptest"
	"github.com/statefun-go/statefun/pkg/stateclient"
)

// withKafkaIngress adds a Kafka ingress shop/logins (topic "logins" on
// brokers) to the module the runtime runs.
func withKafkaIngress(t *testing.T, brokers string) func(*app.Config) {
	return func(c *app.Config) {
		mod, err := os.ReadFile(c.ModulePath)
		if err != nil {
			t.Fatal(err)
		}
		mod = append(mod, fmt.Sprintf(`---
kind: io.statefun.kafka.v1/ingress
spec:
  id: shop/logins
  address: %s
  consumerGroupId: shop
  startupPosition:
    type: earliest
  topics:
    - topic: logins
      valueType: io.statefun.types/string
      targets: [example/person]
`, brokers)...)
		if err := os.WriteFile(c.ModulePath, mod, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStateDeadLetters runs `statefun run`'s app with a Kafka ingress on
// kfake, produces records it cannot deliver among good ones, and reads
// them with `statefun state dead-letters`: the summary, the table, JSON
// with the exact bytes, one page at a time, filters, and with tokens a
// read-only token is enough while none is refused.
func TestStateDeadLetters(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "logins"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	brokers := strings.Join(kc.ListenAddrs(), ",")
	pc, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pc.ProduceSync(ctx,
		&kgo.Record{Topic: "logins", Partition: 0, Key: []byte("alice"), Value: []byte("hi")},
		&kgo.Record{Topic: "logins", Partition: 0, Key: nil, Value: []byte("who am I")},
		&kgo.Record{Topic: "logins", Partition: 1, Key: []byte("bad\xff"), Value: []byte{0xff, 0xfe}},
		&kgo.Record{Topic: "logins", Partition: 1, Key: []byte{}, Value: []byte("empty")},
		&kgo.Record{Topic: "logins", Partition: 1, Key: nil, Value: []byte("again")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}

	rt := startRuntime(t, apptest.WithTokens, withKafkaIngress(t, brokers))
	viewer := "viewer-secret-0123456789"
	cl := rt.Client(t, stateclient.WithToken(viewer))
	waitDead := time.Now().Add(30 * time.Second)
	for {
		sum, err := cl.DeadLetterSummary(context.Background())
		if err == nil && len(sum) == 1 && sum[0].DeadLetters == 4 {
			break
		}
		if time.Now().After(waitDead) {
			t.Fatalf("the dead letters were not stored: %+v %v", sum, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// No token: refused, and the CLI says how to give one.
	if r := rt.cli(t, "", "dead-letters"); r.code != 1 || !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "--token") {
		t.Fatalf("no token: %s", r)
	}
	t.Setenv("STATEFUN_TOKEN", viewer) // read scope only

	r := rt.ok(t, "", "dead-letters")
	for _, re := range []string{`^INGRESS\s+TOPIC\s+REASON\s+COUNT`, `^shop/logins\s+logins\s+empty-key\s+1\s`,
		`^shop/logins\s+logins\s+invalid-utf8-key\s+1\s`, `^shop/logins\s+logins\s+null-key\s+2\s`} {
		if !regexpLine(r.stdout, re) {
			t.Errorf("summary lacks %s:\n%s", re, r.stdout)
		}
	}

	r = rt.ok(t, "", "dead-letters", "shop/logins")
	for _, re := range []string{`^STORED\s+TOPIC\s+PARTITION\s+OFFSET\s+REASON\s+KEY\s+VALUE$`,
		`\slogins\s+0\s+1\s+null-key\s+\(null\)\s+"who am I"$`,
		`\slogins\s+1\s+0\s+invalid-utf8-key\s+\(4 bytes, not UTF-8\)\s+\(2 bytes, not UTF-8\)$`,
		`\slogins\s+1\s+1\s+empty-key\s+""\s+"empty"$`,
		`\slogins\s+1\s+2\s+null-key\s+\(null\)\s+"again"$`} {
		if !regexpLine(r.stdout, re) {
			t.Errorf("table lacks %s:\n%s", re, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, "\n"); n != 5 {
		t.Errorf("%d lines, want a head and 4 dead letters:\n%s", n, r.stdout)
	}

	// JSON carries the exact bytes.
	r = rt.ok(t, "", "dead-letters", "shop/logins", "--partition", "1", "--reason", "invalid-utf8-key", "-o", "json")
	var list []stateclient.DeadLetter
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(list) != 1 || string(list[0].Key.Bytes) != "bad\xff" || list[0].Key.Text != nil || string(list[0].Value.Bytes) != "\xff\xfe" ||
		list[0].Ingress != "shop/logins" || list[0].Offset != 0 || list[0].Partition != 1 || list[0].StoredAt.IsZero() {
		t.Fatalf("json: %s", r.stdout)
	}

	// One page at a time: the cursor of the next page is on stderr.
	var offsets []string
	args := []string{"dead-letters", "shop/logins", "--limit", "3", "-o", "json"}
	for range 5 {
		r = rt.ok(t, "", args...)
		var page []stateclient.DeadLetter
		if err := json.Unmarshal([]byte(r.stdout), &page); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		for _, d := range page {
			offsets = append(offsets, fmt.Sprintf("%d/%d", d.Partition, d.Offset))
		}
		_, next, ok := strings.Cut(strings.TrimSpace(r.stderr), "next page with --after ")
		if !ok {
			break
		}
		args = []string{"dead-letters", "shop/logins", "--limit", "3", "-o", "json", "--after", next}
	}
	if got := strings.Join(offsets, " "); len(offsets) != 4 || !strings.Contains(got, "0/1") || !strings.Contains(got, "1/2") {
		t.Errorf("paged: %s", got)
	}

	// An ingress without dead letters lists nothing; bad usage is exit 2.
	if r := rt.ok(t, "", "dead-letters", "shop/gone"); strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("an ingress without dead letters: %s", r)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dead-letters", "shop"}, "<namespace>/<name>"},
		{[]string{"dead-letters", "shop/logins", "--limit", "1001"}, "--limit"},
		{[]string{"dead-letters", "shop/logins", "--since", "yesterday"}, "--since"},
		{[]string{"dead-letters", "shop/logins", "--topic", ""}, "--topic"},
		{[]string{"dead-letters", "shop/logins", "--after", "x"}, "--after"},
		{[]string{"dead-letters", "--topic", "logins"}, "one ingress"},
		{[]string{"dead-letters", "-o", "yaml"}, "-o"},
	} {
		if r := rt.cli(t, "", c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: %s", c.args, r)
		}
	}
	// The server's 400 for a bad cursor reaches the operator.
	if r := rt.cli(t, "", "dead-letters", "shop/logins", "--limit", "1", "--after", "nope"); r.code != 1 || !strings.Contains(r.stderr, "?after=") {
		t.Errorf("bad cursor: %s", r)
	}
}
