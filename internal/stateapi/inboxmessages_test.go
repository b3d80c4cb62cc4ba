package stateapi

import (
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/engine/committer"
	"github.com/statefun-go/statefun/internal/invoker"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/internal/types"
)

// noOutbound is the cluster seam's Outbound of an engine with one
// partition: nothing is ever sent to another partition.
type noOutbound struct{}

func (noOutbound) Message(partition.InboxKey, *protocol.Envelope) error {
	return errors.New("no other partition")
}
func (noOutbound) Egress(int, partition.Egress) error { return errors.New("no egress") }

// startMessagesEngine runs a cluster-mode engine (Owned) with one
// partition, assigned, whose durable work the embedded committer makes
// durable: its messages arrive as records of the messages topic would
// (SubmitArrivals), under inbox keys of the source "messages".
func startMessagesEngine(t *testing.T, fnURL string, pauseAfter int) *engine.Engine {
	t.Helper()
	db, err := store.Open("data", store.Options{Partitions: 1, FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := invoker.New(invoker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{
		Store: db, Functions: fnClient{inv, fnURL},
		Owned: true, Durability: committer.New(db, committer.Options{}), Outbound: noOutbound{},
		RetryBase: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		PauseAfter: func(t address.TypeName) int {
			if t == fnType {
				return pauseAfter
			}
			return 0
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	t.Cleanup(func() {
		eng.Close()
		inv.Close()
		db.Close()
	})
	if err := eng.Assign(0); err != nil {
		t.Fatal(err)
	}
	return eng
}

// arrive hands texts for test/fn/<id> to the engine as records of the
// messages topic at offsets from, from+1, … and waits until they are
// durable.
func arrive(t *testing.T, eng *engine.Engine, id string, from int64, texts ...string) {
	t.Helper()
	var arr []engine.Arrival
	for i, text := range texts {
		v, err := types.ParseText(types.String, text)
		if err != nil {
			t.Fatal(err)
		}
		arr = append(arr, engine.Arrival{Offset: from + int64(i), Env: &protocol.Envelope{
			Target:   &protocol.Address{Namespace: fnType.Namespace, Type: fnType.Name, Id: id},
			Argument: &protocol.TypedValue{Typename: types.String, HasValue: true, Value: v},
		}})
	}
	done, err := eng.SubmitArrivals(0, arr)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// In cluster mode a message that came through the messages topic has the
// inbox key <partition>/messages/<offset>: GET /inbox lists it so, and
// skip and edit take it back.
func TestInboxActionsTakeMessagesKeys(t *testing.T) {
	fn := &messagePoison{}
	eng := startMessagesEngine(t, fn.start(t), 2)
	api := serve(t, eng, Options{})
	arrive(t, eng, "x", 40, "poison", "m1", "m2")
	var in inboxJSON
	waitFor(t, "x paused by the policy", func() bool {
		in = inboxJSON{}
		send(t, api, "GET", "/inbox/test/fn/x", nil).json(t, &in)
		return in.Paused != nil && in.Inflight != nil && in.Inflight.Waiting
	})
	var keys []string
	for _, m := range in.Inflight.Messages {
		keys = append(keys, m.Key)
	}
	for _, m := range in.Queued.Messages {
		keys = append(keys, m.Key)
	}
	if !slices.Equal(keys, []string{"0/messages/40", "0/messages/41", "0/messages/42"}) {
		t.Fatalf("GET /inbox lists the keys %q, want 0/messages/40..42", keys)
	}
	// Each message shows its value, typed as a state value would be.
	var values []string
	for _, m := range append(slices.Clone(in.Inflight.Messages), in.Queued.Messages...) {
		if m.Value == nil || m.Value.Truncated {
			t.Fatalf("message %s: value %+v", m.Key, m.Value)
		}
		values = append(values, string(m.Value.JSON))
	}
	if !slices.Equal(values, []string{`"poison"`, `"m1"`, `"m2"`}) {
		t.Errorf("GET /inbox shows the values %q, want poison, m1, m2", values)
	}
	// A messages key that is not in the inbox: 404, nothing done.
	if r := send(t, api, "POST", "/inbox/test/fn/x/skip", []byte(`{"key":"0/messages/999"}`)); r.StatusCode != 404 {
		t.Fatalf("skip of an unknown messages key: %s %s", r.Status, r.body)
	}
	edited, err := types.ParseText(types.String, "m2 edited")
	if err != nil {
		t.Fatal(err)
	}
	if r := send(t, api, "POST", "/inbox/test/fn/x/edit", []byte(`{"key":"0/messages/42","typename":"`+types.String+`","value":"`+base64.StdEncoding.EncodeToString(edited)+`"}`)); r.StatusCode != 200 {
		t.Fatalf("edit of 0/messages/42: %s %s", r.Status, r.body)
	}
	if r := send(t, api, "POST", "/inbox/test/fn/x/skip", []byte(`{"key":"0/messages/40","reason":"poisoned"}`)); r.StatusCode != 200 {
		t.Fatalf("skip of 0/messages/40: %s %s", r.Status, r.body)
	}
	if r := send(t, api, "POST", "/resume/test/fn/x", nil); r.StatusCode != 200 {
		t.Fatalf("resume: %s %s", r.Status, r.body)
	}
	waitFor(t, "m1 and the edited m2", func() bool { return len(fn.seen("x")) == 2 })
	if got := fn.seen("x"); !slices.Equal(got, []string{"m1", "m2 edited"}) {
		t.Fatalf("after the skip, the edit and the resume the function saw %v", got)
	}
}

// A message's value in GET /inbox: JSON when it reads so, base64 always,
// at most MaxShownMessageBytes of it (truncated then, and no JSON).
func TestMessageValueShownBounded(t *testing.T) {
	short, err := types.ParseText(types.String, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if v := messageValueOf(types.String, short); string(v.JSON) != `"hello"` || v.Truncated || v.Base64 != base64.StdEncoding.EncodeToString(short) {
		t.Errorf("a short string: %+v", v)
	}
	if v := messageValueOf("example/Order", []byte(`{"id":7}`)); v.JSON == nil || v.Truncated {
		t.Errorf("JSON bytes: %+v", v)
	}
	if v := messageValueOf("example/Blob", []byte{0xff, 0x00}); v.JSON != nil || v.Base64 != "/wA=" {
		t.Errorf("bytes: %+v", v)
	}
	big := make([]byte, 3*MaxShownMessageBytes)
	v := messageValueOf("example/Blob", big)
	shown, err := base64.StdEncoding.DecodeString(v.Base64)
	if err != nil || len(shown) != MaxShownMessageBytes || !v.Truncated || v.JSON != nil {
		t.Errorf("a long value: %d bytes shown, truncated %v, json %v", len(shown), v.Truncated, v.JSON)
	}
}
