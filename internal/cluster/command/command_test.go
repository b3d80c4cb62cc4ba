package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/ingress"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/stateapi"
	"github.com/statefun-go/statefun/internal/store"
)

// The owner in these tests is a real engine on an in-memory store with the
// real state API on httptest; the Sender reads receipts from it over HTTP.
// Produce is the Sender's test double of the messages topic and the
// owner's session: it records each command and, when the owner is up,
// applies it on the owner engine once per id, as the session's
// SubmitArrivals does.

type noFunctions struct{}

func (noFunctions) Call(context.Context, address.TypeName, *protocol.ToFunction) (*protocol.FromFunction, error) {
	return nil, errors.New("no functions in this test")
}

type quiet struct{}

func (quiet) Infof(string, ...any)         {}
func (quiet) Errorf(string, ...any)        {}
func (quiet) Fatalf(f string, args ...any) { panic(f) }

const partitions = 4

// secret is the cluster secret the Sender and the owner share.
var secret = []byte("0123456789abcdef0123456789abcdef")

func startOwner(t *testing.T, tokens ...stateapi.Token) (*engine.Engine, string) {
	t.Helper()
	db, err := store.Open("data", store.Options{Partitions: partitions, FS: vfs.NewMem(), Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: db, Functions: noFunctions{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	srv := httptest.NewServer(stateapi.New(eng, eng.Reads(), stateapi.Options{Tokens: tokens, Nodes: trust.NewNodeAuth(secret, "shop", "owner")}).Handler(http.NotFoundHandler()))
	t.Cleanup(func() {
		srv.Close()
		eng.Close()
		db.Close()
	})
	return eng, srv.URL
}

// topic records the commands produced and applies them on the owner.
type topic struct {
	mu      sync.Mutex
	owner   *engine.Engine
	up      bool // the owner takes commands
	fail    error
	records []*protocol.Envelope
	applied map[string]bool
	pending []partition.Mutation
}

func (tp *topic) produce(m partition.Mutation) func(ctx context.Context, env *protocol.Envelope) error {
	return func(ctx context.Context, env *protocol.Envelope) error {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		if tp.fail != nil {
			return tp.fail
		}
		tp.records = append(tp.records, env)
		tp.pending = append(tp.pending, m)
		if tp.up {
			tp.drain(ctx)
		}
		return nil
	}
}

// drain applies the commands not applied yet; called with mu held.
func (tp *topic) drain(ctx context.Context) {
	for _, m := range tp.pending {
		if tp.applied[m.ID] {
			continue
		}
		tp.applied[m.ID] = true
		m.Ack = partition.AckCommitted
		tp.owner.Mutate(ctx, m)
	}
	tp.pending = nil
}

func newSender(t *testing.T, tp *topic, m partition.Mutation, owner func(ctx context.Context, p int) (string, string, bool), budget time.Duration) *Sender {
	t.Helper()
	s, err := New(Config{Produce: tp.produce(m), Owner: owner, Self: "me", Partitions: partitions, Budget: budget,
		Local: func(ctx context.Context, id string) (*protocol.Receipt, bool, error) {
			return tp.owner.WaitReceipt(ctx, id)
		},
		DecodeReceipt: stateapi.DecodeReceipt,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)), Auth: trust.NewNodeAuth(secret, "shop", "me")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func put(id, value string) partition.Mutation {
	return partition.Mutation{ID: id, Addr: address.Address{Type: address.TypeName{Namespace: "ns", Name: "t"}, ID: "a"},
		State: "s", Op: partition.OpPut, Typename: "io.statefun.types/string", Value: []byte(value), Ack: partition.AckCommitted, Principal: "p"}
}

// TestSendCommitted: the command carries the mutation and its id, and the
// answer is the owner's final receipt, read over HTTP.
func TestSendCommitted(t *testing.T) {
	eng, url := startOwner(t)
	tp := &topic{owner: eng, up: true, applied: map[string]bool{}}
	m := put("m-1", "v")
	s := newSender(t, tp, m, func(context.Context, int) (string, string, bool) { return "owner", url, true }, 10*time.Second)
	rc, err := s.Send(context.Background(), m, trust.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	stored, _, _ := eng.Reads().Receipt("m-1")
	if rc.Mutation != "m-1" || rc.Reject != partition.Applied || rc.Ack != partition.AckCommitted || rc.Version == 0 || rc.Version != stored.GetVersion() || rc.Checkpoint != stored.GetCheckpoint() {
		t.Errorf("receipt %+v, the owner stored %v", rc, stored)
	}
	if len(tp.records) != 1 || tp.records[0].GetMutation().GetId() != "m-1" || string(tp.records[0].GetMutation().GetValue()) != "v" ||
		tp.records[0].GetMutation().GetTarget().GetId() != "a" || tp.records[0].GetTarget() != nil {
		t.Errorf("commands produced: %v", tp.records)
	}

	// A condition fails on the owner: the rejection and the current
	// version come back.
	m2 := put("m-2", "w")
	m2.IfMatch = 12345
	s = newSender(t, tp, m2, func(context.Context, int) (string, string, bool) { return "owner", url, true }, 10*time.Second)
	rc2, err := s.Send(context.Background(), m2, trust.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if rc2.Reject != partition.RejectPrecondition || rc2.Version != rc.Version || rc2.Reason == "" {
		t.Errorf("rejected receipt %+v; want a precondition rejection at version %d", rc2, rc.Version)
	}

	// ack=accepted: once produced, without waiting for the owner.
	tp.up = false
	m3 := put("m-3", "x")
	m3.Ack = partition.AckAccepted
	s = newSender(t, tp, m3, func(context.Context, int) (string, string, bool) { return "owner", url, true }, 10*time.Second)
	if rc3, err := s.Send(context.Background(), m3, trust.Caller{}); err != nil || rc3.Ack != partition.AckAccepted || rc3.Mutation != "m-3" {
		t.Errorf("accepted: %+v %v", rc3, err)
	}
}

// TestSendFollowsMove: the owner is killed with the command unapplied; the
// partition moves to another node, the Sender produces the command again
// (same id) and reads the receipt from the new owner. The id applies once.
func TestSendFollowsMove(t *testing.T) {
	eng, url := startOwner(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	tp := &topic{owner: eng, applied: map[string]bool{}}
	m := put("m-1", "v")
	var mu sync.Mutex
	calls := 0
	owner := func(context.Context, int) (string, string, bool) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case calls < 4:
			return "old", deadURL, true
		case calls < 6:
			return "", "", false // moving
		default:
			tp.mu.Lock()
			tp.up = true
			tp.drain(context.Background())
			tp.mu.Unlock()
			return "owner", url, true
		}
	}
	s := newSender(t, tp, m, owner, 20*time.Second)
	rc, err := s.Send(context.Background(), m, trust.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Reject != partition.Applied || rc.Version == 0 {
		t.Errorf("receipt %+v", rc)
	}
	if len(tp.records) != 2 || tp.records[1].GetMutation().GetId() != "m-1" {
		t.Errorf("%d commands produced; want the first and one more after the move, with the same id", len(tp.records))
	}
	stored, _, _ := eng.Reads().Receipt("m-1")
	recs, err := eng.Reads().AuditOf("m-1", stored.GetAt())
	if n := len(recs); err != nil || n != 1 {
		t.Errorf("%d audit records of m-1; want 1", n)
	}
}

// TestSendFailsClearly: Kafka not acknowledging, or the receipt not final
// within the budget, answer 503 naming the mutation (its receipt is where
// to look); a token that cannot read the owner's receipt is a 403; a
// partition this node owns is read from its own store.
func TestSendFailsClearly(t *testing.T) {
	eng, url := startOwner(t)
	tp := &topic{owner: eng, applied: map[string]bool{}, fail: errors.New("no broker")}
	m := put("m-1", "v")
	s := newSender(t, tp, m, func(context.Context, int) (string, string, bool) { return "owner", url, true }, 500*time.Millisecond)
	_, err := s.Send(context.Background(), m, trust.Caller{})
	var ce *Error
	if !errors.As(err, &ce) || ce.Status != 503 || ce.Mutation != "m-1" {
		t.Errorf("Kafka down: %v", err)
	}

	tp.fail = nil // produced, but nobody applies it
	_, err = s.Send(context.Background(), m, trust.Caller{})
	if !errors.As(err, &ce) || ce.Status != 503 || ce.Mutation != "m-1" {
		t.Errorf("no receipt in time: %v", err)
	}

	writer := stateapi.Token{Name: "w", Secret: "writer-secret-0123456789", Scopes: []string{stateapi.ScopeWrite}}
	_, url2 := startOwner(t, writer)
	s = newSender(t, tp, m, func(context.Context, int) (string, string, bool) { return "owner", url2, true }, 5*time.Second)
	_, err = s.Send(context.Background(), m, trust.Caller{Principal: writer.Name, Scopes: writer.Scopes})
	if !errors.As(err, &ce) || ce.Status != 403 {
		t.Errorf("a token without the read scope: %v", err)
	}

	// A command over what the producer takes is refused for good, at once:
	// a 413, not a 503 after retrying it for the whole budget.
	tp.fail = fmt.Errorf("%w: over max.request.size", ingress.ErrTooLarge)
	s = newSender(t, tp, m, func(context.Context, int) (string, string, bool) { return "owner", url, true }, 15*time.Second)
	start := time.Now()
	_, err = s.Send(context.Background(), m, trust.Caller{})
	if !errors.As(err, &ce) || ce.Status != http.StatusRequestEntityTooLarge || ce.Mutation != "m-1" ||
		!strings.Contains(ce.Detail, "was not applied") || !strings.Contains(ce.Detail, "max.request.size") {
		t.Errorf("a command too large for Kafka: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("a command too large for Kafka was answered after %v, retried instead of refused", d)
	}
	tp.fail = nil

	tp.up = true
	m2 := put("m-2", "v")
	s = newSender(t, tp, m2, func(context.Context, int) (string, string, bool) { return "me", "", true }, 5*time.Second)
	if rc, err := s.Send(context.Background(), m2, trust.Caller{}); err != nil || rc.Version == 0 {
		t.Errorf("owned here: %+v %v", rc, err)
	}
}
