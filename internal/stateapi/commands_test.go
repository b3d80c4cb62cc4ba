package stateapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/partition"
)

// elsewhere is the engine of a node that does not own the addresses whose
// id starts with "far-": its reads and mutations of them answer ErrMoved,
// as a cluster engine does for a partition owned by another node.
type elsewhere struct{ *engine.Engine }

func far(a address.Address) bool { return strings.HasPrefix(a.ID, "far-") }

func (e elsewhere) Read(ctx context.Context, a address.Address, state string) (partition.Reply, error) {
	if far(a) {
		return partition.Reply{}, fmt.Errorf("owned elsewhere: %w", engine.ErrMoved)
	}
	return e.Engine.Read(ctx, a, state)
}

func (e elsewhere) Mutate(ctx context.Context, m partition.Mutation) (partition.Receipt, error) {
	if far(m.Addr) {
		return partition.Receipt{}, fmt.Errorf("owned elsewhere: %w", engine.ErrMoved)
	}
	return e.Engine.Mutate(ctx, m)
}

// toOwner is the API's Commands test double: it applies each mutation on
// the owner's engine, as the owner's session applies a command, and
// answers with its receipt as Commands does (or with err when set).
type toOwner struct {
	owner *engine.Engine
	mu    sync.Mutex
	sent  []partition.Mutation
	auth  []trust.Caller
	err   error
}

func (c *toOwner) Send(ctx context.Context, m partition.Mutation, auth trust.Caller) (partition.Receipt, error) {
	c.mu.Lock()
	c.sent, c.auth = append(c.sent, m), append(c.auth, auth)
	c.mu.Unlock()
	if c.err != nil {
		return partition.Receipt{}, c.err
	}
	ack := m.Ack
	m.Ack = partition.AckCommitted
	rc, err := c.owner.Mutate(ctx, m)
	if ack == partition.AckAccepted {
		return partition.Receipt{Mutation: m.ID, Ack: partition.AckAccepted}, err
	}
	return rc, err
}

// TestCommandsOwnedElsewhere: on a node that does not own an address, a
// PUT, a DELETE of an entry and a DELETE of an address go to Commands
// carrying everything the owner needs (value, conditions, principal,
// reason); the owner's receipt answers the client as in embedded mode: 200
// with ETag, 412 with the current version for a condition that failed on
// the owner, 409 for a type conflict, 404 for a delete of nothing, 202 with
// Location for ack=accepted. Validation that needs no state happens at the
// edge (nothing sent). A restore is not sent (its image would be read from
// this node's store). A Commands failure answers its status, with the
// receipt's Location and Retry-After.
func TestCommandsOwnedElsewhere(t *testing.T) {
	owner := startWithFunction(t, engineConfig{})
	here := startEngine(t, engineConfig{})
	cmds := &toOwner{owner: owner}
	srv := httptest.NewServer(New(elsewhere{here}, here.Reads(), Options{Commands: cmds}).Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	base := srv.URL
	ownerBase := serve(t, owner, Options{})

	const entry = "/state/test/fn/far-1/str"
	r := send(t, base, "PUT", entry, []byte("hello"), "Content-Type", "text/plain", "Statefun-Type", "io.statefun.types/string", "Statefun-Reason", "fix")
	var rc receiptJSON
	r.json(t, &rc)
	if r.StatusCode != 200 || rc.Status != "committed" || rc.Version == nil || r.Header.Get("ETag") != etag(mustVersion(t, rc.Version)) {
		t.Fatalf("PUT through a non-owner: %s %s (ETag %q)", r.Status, r.body, r.Header.Get("ETag"))
	}
	if len(cmds.sent) != 1 || cmds.sent[0].Op != partition.OpPut || cmds.sent[0].Reason != "fix" || cmds.sent[0].Principal != "anonymous" || cmds.sent[0].ID != rc.Mutation {
		t.Fatalf("sent %+v", cmds.sent)
	}
	if g := send(t, ownerBase, "GET", entry, nil, "Accept", "text/plain"); g.StatusCode != 200 || string(g.body) != "hello" {
		t.Fatalf("the owner holds %s %q", g.Status, g.body)
	}

	// A stale If-Match fails on the owner: 412 with its current version.
	r = send(t, base, "PUT", entry, []byte("x"), "Content-Type", "text/plain", "Statefun-Type", "io.statefun.types/string", "If-Match", `"1"`)
	p := r.problem(t)
	if r.StatusCode != 412 || p.CurrentVersion == nil || *p.CurrentVersion != *rc.Version || p.Receipt == nil || p.Receipt.Rejection != "precondition" || r.Header.Get("ETag") != `"`+*rc.Version+`"` {
		t.Errorf("stale If-Match through a non-owner: %s %s", r.Status, r.body)
	}
	// The edge does not know the registered typename; the owner does.
	r = send(t, base, "PUT", "/state/test/fn/far-1/i64", []byte("hello"), "Content-Type", "text/plain", "Statefun-Type", "io.statefun.types/string")
	if r.StatusCode != 409 || r.problem(t).Receipt.Rejection != "type-conflict" {
		t.Errorf("type conflict found by the owner: %s %s", r.Status, r.body)
	}
	// An octet-stream value without a typename is the owner's to resolve.
	r = send(t, base, "PUT", "/state/test/fn/far-1/i64", []byte{0, 0, 0, 0, 0, 0, 0, 7}, "Content-Type", "application/octet-stream")
	if r.StatusCode != 200 {
		t.Errorf("octet-stream without a typename: %s %s", r.Status, r.body)
	}
	// A text value needs a typename to be parsed at the edge.
	n := len(cmds.sent)
	r = send(t, base, "PUT", "/state/test/fn/far-1/i64", []byte("7"), "Content-Type", "text/plain")
	if r.StatusCode != 400 || !strings.Contains(r.problem(t).Detail, "Statefun-Type") {
		t.Errorf("text without a typename through a non-owner: %s %s", r.Status, r.body)
	}
	// Validation that needs no state: at the edge, nothing sent.
	r = send(t, base, "PUT", entry, []byte("x"), "Content-Type", "text/plain", "Statefun-Type", "not a typename")
	if r.StatusCode != 400 {
		t.Errorf("bad Statefun-Type through a non-owner: %s %s", r.Status, r.body)
	}
	r = send(t, base, "PUT", entry+"?ack=soon", []byte("x"), "Content-Type", "text/plain", "Statefun-Type", "io.statefun.types/string")
	if r.StatusCode != 400 {
		t.Errorf("bad ack through a non-owner: %s %s", r.Status, r.body)
	}
	if len(cmds.sent) != n {
		t.Errorf("%d commands sent for requests refused at the edge", len(cmds.sent)-n)
	}

	// ack=accepted: 202 with Location once Commands has it.
	r = send(t, base, "PUT", entry+"?ack=accepted", []byte("later"), "Content-Type", "text/plain", "Statefun-Type", "io.statefun.types/string")
	r.json(t, &rc)
	if r.StatusCode != 202 || rc.Status != "accepted" || r.Header.Get("Location") != "/mutations/"+rc.Mutation {
		t.Errorf("ack=accepted through a non-owner: %s %s, Location %q", r.Status, r.body, r.Header.Get("Location"))
	}
	if s := cmds.sent[len(cmds.sent)-1]; s.Ack != partition.AckAccepted {
		t.Errorf("ack=accepted sent with ack %v", s.Ack)
	}

	// Deletes.
	if r = send(t, base, "DELETE", entry, nil); r.StatusCode != 200 {
		t.Errorf("DELETE through a non-owner: %s %s", r.Status, r.body)
	}
	if r = send(t, base, "DELETE", entry, nil); r.StatusCode != 404 || r.problem(t).Receipt.Rejection != "not-found" {
		t.Errorf("DELETE of nothing through a non-owner: %s %s", r.Status, r.body)
	}
	if r = send(t, base, "DELETE", "/state/test/fn/far-1", nil); r.StatusCode != 200 {
		t.Errorf("DELETE of an address through a non-owner: %s %s", r.Status, r.body)
	}
	if g := send(t, ownerBase, "GET", "/state/test/fn/far-1/i64", nil); g.StatusCode != 404 {
		t.Errorf("the owner after the address's delete: %s %s", g.Status, g.body)
	}

	// A restore reads its image here: not sent, 503.
	n = len(cmds.sent)
	if r = send(t, base, "POST", "/state/test/fn/far-1?asOf=0.1", nil); r.StatusCode != 503 || len(cmds.sent) != n {
		t.Errorf("restore through a non-owner: %s %s (%d sent)", r.Status, r.body, len(cmds.sent)-n)
	}
	// An address this node owns is applied here.
	if r = send(t, base, "PUT", "/state/test/fn/near/str", []byte("x"), "Content-Type", "text/plain", "Statefun-Type", "io.statefun.types/string"); r.StatusCode != 200 || len(cmds.sent) != n {
		t.Errorf("PUT of an owned address: %s %s (%d sent)", r.Status, r.body, len(cmds.sent)-n)
	}

	// A Commands failure answers its status and names the receipt.
	cmds.err = commandErr{status: 503, detail: "not final in time", id: "m-1"}
	r = send(t, base, "PUT", entry, []byte("x"), "Content-Type", "text/plain", "Statefun-Type", "io.statefun.types/string", "Authorization", "Bearer abc")
	if r.StatusCode != 503 || r.Header.Get("Location") != "/mutations/m-1" || r.Header.Get("Retry-After") == "" || r.problem(t).Detail != "not final in time" {
		t.Errorf("a Commands failure: %s %s, Location %q", r.Status, r.body, r.Header.Get("Location"))
	}
	// Without tokens the caller is anonymous, with every scope; the
	// Authorization header is not handed on.
	if a := cmds.auth[len(cmds.auth)-1]; a.Principal != "anonymous" || strings.Join(a.Scopes, ",") != "read,write" {
		t.Errorf("Commands got the caller %+v", a)
	}
}

func mustVersion(t *testing.T, v *string) uint64 {
	t.Helper()
	var n uint64
	if _, err := fmt.Sscan(*v, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReceiptRejection: a stored rejected receipt names its rejection,
// which a node reading it from the owner turns back into the answer.
func TestReceiptRejection(t *testing.T) {
	for _, c := range []partition.RejectCode{partition.RejectPrecondition, partition.RejectTypeConflict,
		partition.RejectNoTypename, partition.RejectNotFound, partition.RejectConflict} {
		got, ok := rejectionCode(rejectionName(c))
		if !ok || got != c {
			t.Errorf("%d: %q read back as %d %v", c, rejectionName(c), got, ok)
		}
	}
	eng := startWithFunction(t, engineConfig{})
	base := serve(t, eng, Options{})
	r := send(t, base, "DELETE", "/state/test/fn/nobody/str", nil)
	p := r.problem(t)
	if r.StatusCode != 404 || p.Receipt == nil || p.Receipt.Rejection != "not-found" {
		t.Fatalf("DELETE of nothing: %s %s", r.Status, r.body)
	}
	g := send(t, base, "GET", "/mutations/"+p.Receipt.Mutation, nil)
	var rc receiptJSON
	g.json(t, &rc)
	if rc.Status != "rejected" || rc.Rejection != "not-found" {
		t.Errorf("the stored receipt: %s", g.body)
	}
}

// commandErr is a Commands failure, as the cluster's command sender makes
// them.
type commandErr struct {
	status     int
	detail, id string
}

func (e commandErr) Error() string      { return e.detail }
func (e commandErr) HTTPStatus() int    { return e.status }
func (e commandErr) MutationID() string { return e.id }
