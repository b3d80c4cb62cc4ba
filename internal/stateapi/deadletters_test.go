package stateapi

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/kafkaingress"
	"github.com/statefun-go/statefun/internal/store"
)

// deadPage is a dead-letter page as a client decodes it.
type deadPage struct {
	DeadLetters []deadLetterJSON `json:"deadLetters"`
	Next        *string          `json:"next"`
}

type deadSummary struct {
	Ingresses []ingressDeadLetters `json:"ingresses"`
}

func (p deadPage) offsets() string {
	var out []string
	for _, d := range p.DeadLetters {
		out = append(out, fmt.Sprintf("%s/%d/%d", d.Topic, d.Partition, d.Offset))
	}
	return strings.Join(out, " ")
}

// TestDeadLettersFromKafka runs the real Kafka ingress against kfake:
// records with a null, empty, non-UTF-8 and over-long key and one too
// large are consumed, stored as dead letters beside good records, and the
// API shows each with its place in the topic, its reason, its key and
// value, and the summary counts them.
func TestDeadLettersFromKafka(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "logins"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	long := strings.Repeat("k", address.MaxSegmentBytes+1)
	rs := []*kgo.Record{
		{Topic: "logins", Key: []byte("alice"), Value: []byte("ok")},
		{Topic: "logins", Key: nil, Value: []byte("no key"), Timestamp: time.UnixMilli(1_700_000_000_123)},
		{Topic: "logins", Key: []byte{}, Value: []byte("empty key")},
		{Topic: "logins", Key: []byte("bad\xff"), Value: []byte{0x00, 0xfe, 0x01}},
		{Topic: "logins", Key: []byte(long), Value: []byte("long key")},
		{Topic: "logins", Key: []byte("big"), Value: []byte(strings.Repeat("v", 65))},
		{Topic: "logins", Key: nil, Value: nil},
	}
	pc, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pc.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pc.Close()

	eng := startEngine(t, engineConfig{})
	c, err := kafkaingress.New(kafkaingress.Config{ID: "shop/logins", Brokers: kc.ListenAddrs(), GroupID: "g",
		Routes:  []kafkaingress.Route{{Topic: "logins", ValueType: "shop/Login", Targets: []address.TypeName{fnType}}},
		Startup: kafkaingress.Startup{Kind: kafkaingress.StartEarliest}, MaxValueBytes: 64,
		ClientOpts: []kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)}}, eng)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(c.Close)
	waitFor(t, "every record consumed", func() bool {
		ps, err := eng.SourcePositions("shop/logins")
		return err == nil && len(ps) == 1 && ps[0].Next == int64(len(rs))
	})
	api := serve(t, eng, Options{})

	r := send(t, api, "GET", "/ingresses/shop/logins/dead-letters", nil)
	if r.StatusCode != 200 {
		t.Fatalf("%s %s", r.Status, r.body)
	}
	var page deadPage
	r.json(t, &page)
	if page.offsets() != "logins/0/1 logins/0/2 logins/0/3 logins/0/4 logins/0/5 logins/0/6" || page.Next != nil {
		t.Fatalf("dead letters %s\n%s", page.offsets(), r.body)
	}
	text := func(s string) *string { return &s }
	want := []struct {
		reason string
		key    *bytesJSON
		value  bytesJSON
	}{
		{"null-key", nil, bytesJSON{6, base64.StdEncoding.EncodeToString([]byte("no key")), text("no key")}},
		{"empty-key", &bytesJSON{0, "", text("")}, bytesJSON{9, base64.StdEncoding.EncodeToString([]byte("empty key")), text("empty key")}},
		{"invalid-utf8-key", &bytesJSON{4, base64.StdEncoding.EncodeToString([]byte("bad\xff")), nil}, bytesJSON{3, "AP4B", nil}},
		{"key-too-long", &bytesJSON{len(long), base64.StdEncoding.EncodeToString([]byte(long)), text(long)}, bytesJSON{8, base64.StdEncoding.EncodeToString([]byte("long key")), text("long key")}},
		{"value-too-large", &bytesJSON{3, "Ymln", text("big")}, bytesJSON{65, base64.StdEncoding.EncodeToString([]byte(strings.Repeat("v", 65))), text(strings.Repeat("v", 65))}},
		{"null-key", nil, bytesJSON{0, "", text("")}},
	}
	for i, d := range page.DeadLetters {
		w := want[i]
		if d.Ingress != "shop/logins" || d.Reason != w.reason || fmt.Sprint(deref(d.Key)) != fmt.Sprint(deref(w.key)) ||
			fmt.Sprint(deref(&d.Value)) != fmt.Sprint(deref(&w.value)) || d.StoredAt.IsZero() || time.Since(d.StoredAt) > time.Hour {
			t.Errorf("dead letter %d: %+v", i, d)
		}
	}
	if ts := page.DeadLetters[0].Timestamp; !ts.Equal(time.UnixMilli(1_700_000_000_123)) {
		t.Errorf("the record's timestamp: %v", ts)
	}

	// The summary counts them by topic and reason.
	var sum deadSummary
	send(t, api, "GET", "/ingresses", nil).json(t, &sum)
	if len(sum.Ingresses) != 1 || sum.Ingresses[0].Ingress != "shop/logins" || sum.Ingresses[0].DeadLetters != 6 {
		t.Fatalf("summary %+v", sum)
	}
	var counts []string
	for _, c := range sum.Ingresses[0].Counts {
		counts = append(counts, fmt.Sprintf("%s:%s:%d", c.Topic, c.Reason, c.Count))
	}
	if got := strings.Join(counts, " "); got != "logins:empty-key:1 logins:invalid-utf8-key:1 logins:key-too-long:1 logins:null-key:2 logins:value-too-large:1" {
		t.Errorf("counts %s", got)
	}
}

// deref renders a *bytesJSON with its text, for comparisons.
func deref(b *bytesJSON) string {
	if b == nil {
		return "null"
	}
	t := "-"
	if b.Text != nil {
		t = *b.Text
	}
	return fmt.Sprintf("%d %s %q", b.Length, b.Base64, t)
}

// ingestDead stores dead letters through the engine's source path, as a
// Kafka ingress does: one batch per (ingress, topic, partition).
func ingestDead(t *testing.T, eng *engine.Engine, ingress, topic string, partition int32, reasons ...string) {
	t.Helper()
	ps, err := eng.SourcePositions(ingress)
	if err != nil {
		t.Fatal(err)
	}
	next := int64(0)
	for _, p := range ps {
		if p.Topic == topic && p.Partition == partition {
			next = p.Next
		}
	}
	b := engine.SourceBatch{Position: store.SourcePosition{Ingress: ingress, Topic: topic, Partition: partition, Next: next + int64(len(reasons))}}
	for i, reason := range reasons {
		off := next + int64(i)
		b.DeadLetters = append(b.DeadLetters, store.DeadLetter{Ingress: ingress, Topic: topic, Partition: partition, Offset: off,
			Reason: reason, Timestamp: off, KeyNull: reason == "null-key", Value: []byte(fmt.Sprintf("v%d", off))})
	}
	if err := eng.IngestFrom(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// listAll pages through an ingress's dead letters with a page size and
// filters, and checks that every page but the last is full.
func listAll(t *testing.T, api, ingress, query string, limit int) deadPage {
	t.Helper()
	var all deadPage
	after := ""
	for range 1000 {
		target := fmt.Sprintf("/ingresses/%s/dead-letters?limit=%d%s%s", ingress, limit, query, after)
		r := send(t, api, "GET", target, nil)
		if r.StatusCode != 200 {
			t.Fatalf("GET %s: %s %s", target, r.Status, r.body)
		}
		var p deadPage
		r.json(t, &p)
		all.DeadLetters = append(all.DeadLetters, p.DeadLetters...)
		if p.Next == nil {
			return all
		}
		if len(p.DeadLetters) != limit {
			t.Fatalf("GET %s: a page of %d with a next cursor", target, len(p.DeadLetters))
		}
		after = "&after=" + url.QueryEscape(*p.Next)
	}
	t.Fatal("paging did not end")
	return all
}

// TestDeadLettersPagingAndFilters stores dead letters of two ingresses,
// several topics, partitions and reasons through engine.IngestFrom, most
// within the same millisecond (the clock is held), and pages through them
// with every page size: the pages together are the whole listing, in
// stored order, without gap or repeat; the filters select what they name.
func TestDeadLettersPagingAndFilters(t *testing.T) {
	var clock atomic.Int64
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	clock.Store(t0.UnixMilli())
	eng := startEngine(t, engineConfig{now: func() time.Time { return time.UnixMilli(clock.Load()) }})
	api := serve(t, eng, Options{})

	ingestDead(t, eng, "shop/in", "b", 1, "null-key", "empty-key")
	ingestDead(t, eng, "shop/in", "a", 0, "null-key")
	ingestDead(t, eng, "shop/other", "a", 0, "null-key")
	ingestDead(t, eng, "shop/in", "a", 2, "no-route", "null-key", "null-key")
	clock.Add(1000)
	ingestDead(t, eng, "shop/in", "a", 0, "value-too-large", "null-key")
	clock.Add(1000)
	ingestDead(t, eng, "shop/in", "b", 1, "null-key")

	// Stored order: time, then topic, partition, offset.
	const all = "a/0/0 a/2/0 a/2/1 a/2/2 b/1/0 b/1/1 a/0/1 a/0/2 b/1/2"
	for limit := 1; limit <= 10; limit++ {
		if got := listAll(t, api, "shop/in", "", limit).offsets(); got != all {
			t.Fatalf("limit %d:\n got %s\nwant %s", limit, got, all)
		}
	}
	for _, c := range []struct{ query, want string }{
		{"&topic=a", "a/0/0 a/2/0 a/2/1 a/2/2 a/0/1 a/0/2"},
		{"&topic=a&partition=0", "a/0/0 a/0/1 a/0/2"},
		{"&partition=1", "b/1/0 b/1/1 b/1/2"},
		{"&reason=null-key", "a/0/0 a/2/1 a/2/2 b/1/0 a/0/2 b/1/2"},
		{"&reason=null-key&topic=a", "a/0/0 a/2/1 a/2/2 a/0/2"},
		{"&since=" + url.QueryEscape(t0.Add(time.Second).Format(time.RFC3339)), "a/0/1 a/0/2 b/1/2"},
		{"&until=" + url.QueryEscape(t0.Add(time.Second).Format(time.RFC3339)), "a/0/0 a/2/0 a/2/1 a/2/2 b/1/0 b/1/1 a/0/1 a/0/2"},
		{"&since=" + url.QueryEscape(t0.Add(time.Second).Format(time.RFC3339)) + "&until=" + url.QueryEscape(t0.Add(time.Second).Format(time.RFC3339)), "a/0/1 a/0/2"},
		{"&topic=c", ""},
	} {
		for _, limit := range []int{1, 2, 100} {
			if got := listAll(t, api, "shop/in", c.query, limit).offsets(); got != c.want {
				t.Errorf("%s limit %d:\n got %s\nwant %s", c.query, limit, got, c.want)
			}
		}
	}
	if got := listAll(t, api, "shop/other", "", 100); got.offsets() != "a/0/0" || got.DeadLetters[0].Ingress != "shop/other" {
		t.Errorf("the other ingress: %s", got.offsets())
	}
	// An ingress that holds no dead letters (undeclared, or removed from
	// the module) is an empty page, not a 404.
	r := send(t, api, "GET", "/ingresses/shop/gone/dead-letters", nil)
	if r.StatusCode != 200 || !strings.Contains(string(r.body), `"deadLetters": []`) || !strings.Contains(string(r.body), `"next": null`) {
		t.Errorf("an ingress without dead letters: %s %s", r.Status, r.body)
	}
	var sum deadSummary
	send(t, api, "GET", "/ingresses", nil).json(t, &sum)
	if len(sum.Ingresses) != 2 || sum.Ingresses[0].Ingress != "shop/in" || sum.Ingresses[0].DeadLetters != 9 ||
		!sum.Ingresses[0].OldestStoredAt.Equal(t0) || !sum.Ingresses[0].NewestStoredAt.Equal(t0.Add(2*time.Second)) ||
		sum.Ingresses[1].Ingress != "shop/other" || sum.Ingresses[1].DeadLetters != 1 {
		t.Fatalf("summary %+v", sum)
	}
	var counts []string
	for _, c := range sum.Ingresses[0].Counts {
		counts = append(counts, fmt.Sprintf("%s:%s:%d", c.Topic, c.Reason, c.Count))
	}
	if got := strings.Join(counts, " "); got != "a:no-route:1 a:null-key:4 a:value-too-large:1 b:empty-key:1 b:null-key:2" {
		t.Errorf("counts %s", got)
	}
}

// TestDeadLettersBadQuery: every bad parameter is a 400 that names it,
// before anything is read.
func TestDeadLettersBadQuery(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	api := serve(t, eng, Options{})
	const base = "/ingresses/shop/in/dead-letters"
	for _, c := range []struct{ target, want string }{
		{base + "?partiton=1", "?partiton="},
		{base + "?cursor=x", "?cursor="},
		{base + "?topic=a&topic=b", "?topic= is given 2 times"},
		{base + "?topic=", "?topic="},
		{base + "?topic=%FF", "?topic="},
		{base + "?reason=", "?reason="},
		{base + "?partition=-1", "?partition="},
		{base + "?partition=x", "?partition="},
		{base + "?partition=2147483648", "?partition="},
		{base + "?since=yesterday", "?since="},
		{base + "?until=2025-01-01", "?until="},
		{base + "?since=2025-01-02T00:00:00Z&until=2025-01-01T00:00:00Z", "?since="},
		{base + "?limit=0", "?limit="},
		{base + "?limit=1001", "?limit="},
		{base + "?limit=ten", "?limit="},
		{base + "?after=nope", "?after="},
		{base + "?after=" + base64.RawURLEncoding.EncodeToString([]byte(`[1,"a",2]`)), "?after="},
		{"/ingresses/shop%2Fx/in/dead-letters", "'/'"},
		{"/ingresses/shop/in%2Fx/dead-letters", "'/'"},
		{"/ingresses/shop//dead-letters", "empty"},
		{"/ingresses?ingress=shop/in", "?ingress="},
	} {
		for _, method := range []string{"GET", "HEAD"} {
			r := send(t, api, method, c.target, nil)
			if r.StatusCode != 400 {
				t.Errorf("%s %s: %s, want 400", method, c.target, r.Status)
				continue
			}
			if method == "GET" {
				if p := r.problem(t); !strings.Contains(p.Detail, c.want) {
					t.Errorf("%s: %q does not name %q", c.target, p.Detail, c.want)
				}
			}
		}
	}
	for _, target := range []string{"/ingresses/shop", "/ingresses/shop/in", "/ingresses/shop/in/letters", "/ingresses/shop/in/dead-letters/x"} {
		if r := send(t, api, "GET", target, nil); r.StatusCode != 404 || !strings.Contains(r.problem(t).Detail, "/ingresses/<namespace>/<name>/dead-letters") {
			t.Errorf("GET %s: %s %s", target, r.Status, r.body)
		}
	}
	for _, target := range []string{"/ingresses", base} {
		if r := send(t, api, "POST", target, nil); r.StatusCode != 405 || r.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST %s: %s, Allow %q", target, r.Status, r.Header.Get("Allow"))
		}
	}
}

// TestDeadLettersTokens: with tokens, a read token lists dead letters; no
// token is a 401 and a write-only token a 403.
func TestDeadLettersTokens(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	ingestDead(t, eng, "shop/in", "a", 0, "null-key")
	api := serve(t, eng, Options{Tokens: []Token{tokenRead, tokenWrite}})
	for _, target := range []string{"/ingresses", "/ingresses/shop/in/dead-letters"} {
		if r := send(t, api, "GET", target, nil); r.StatusCode != 401 || r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("GET %s without a token: %s", target, r.Status)
		}
		if r := send(t, api, "GET", target, nil, "Authorization", "Bearer "+tokenWrite.Secret); r.StatusCode != 403 {
			t.Errorf("GET %s with a write token: %s", target, r.Status)
		}
		if r := send(t, api, "GET", target, nil, "Authorization", "Bearer "+tokenRead.Secret); r.StatusCode != 200 || !strings.Contains(string(r.body), `"shop/in"`) {
			t.Errorf("GET %s with a read token: %s %s", target, r.Status, r.body)
		}
	}
}
