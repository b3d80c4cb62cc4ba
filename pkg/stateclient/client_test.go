package stateclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/statefun-go/statefun/internal/apptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

var ctx = context.Background()

func person(id string) stateclient.Address {
	return stateclient.Address{Namespace: "example", Type: "person", ID: id}
}

func mustPut(t *testing.T, c *stateclient.Client, a stateclient.Address, state, body, ct string, o stateclient.PutOptions) *stateclient.Receipt {
	t.Helper()
	rc, err := c.Put(ctx, a, state, []byte(body), ct, o)
	if err != nil {
		t.Fatalf("Put %s %s %q: %v", a, state, body, err)
	}
	return rc
}

func TestRoundTrips(t *testing.T) {
	rt := apptest.Start(t)
	c := rt.Client(t)
	bob := person("Bob")

	// int: text in, text, exact bytes and the envelope out.
	rc := mustPut(t, c, bob, "visits", "41", "text/plain", stateclient.PutOptions{Reason: "test"})
	if rc.Status != "committed" || rc.Version == "" || rc.PreviousVersion != "" || rc.Checkpoint == nil || rc.Mutation == "" {
		t.Fatalf("receipt %+v", rc)
	}
	v, err := c.Get(ctx, bob, "visits", "text/plain")
	if err != nil || string(v.Bytes) != "41" || !v.IsText() || v.Typename != "io.statefun.types/int" || v.Version != rc.Version {
		t.Fatalf("Get text = %+v, %v", v, err)
	}
	v, err = c.Get(ctx, bob, "visits", "")
	if err != nil || !bytes.Equal(v.Bytes, []byte{0x0D, 41, 0, 0, 0}) || v.IsText() {
		t.Fatalf("Get default = %+v, %v", v, err)
	}
	env, err := c.GetEnvelope(ctx, bob, "visits")
	if err != nil || string(env.Value) != "41" || env.Address.ID != "Bob" || env.State != "visits" || env.Version != rc.Version {
		t.Fatalf("GetEnvelope = %+v, %v", env, err)
	}
	// The envelope round-trips: edit the value and write it back.
	env.Value = json.RawMessage("42")
	rc2, err := c.PutEnvelope(ctx, env, stateclient.PutOptions{IfMatch: `"` + rc.Version + `"`})
	if err != nil || rc2.PreviousVersion != rc.Version {
		t.Fatalf("Put envelope: %+v, %v", rc2, err)
	}
	if v, _ := c.Get(ctx, bob, "visits", "text/plain"); string(v.Bytes) != "42" {
		t.Fatalf("after envelope put: %q", v.Bytes)
	}

	// string: the default representation is text.
	mustPut(t, c, bob, "name", "Bob Smith ✓", "text/plain", stateclient.PutOptions{})
	v, err = c.Get(ctx, bob, "name", "")
	if err != nil || string(v.Bytes) != "Bob Smith ✓" || !v.IsText() || v.Typename != "io.statefun.types/string" {
		t.Fatalf("Get string = %+v, %v", v, err)
	}

	// A JSON type, through PutEnvelope.
	profile := &stateclient.Envelope{Address: stateclient.EnvelopeAddress{Namespace: "example", Type: "person", ID: "Bob"},
		State: "profile", Value: json.RawMessage(`{"city":"Zürich","age":7}`)}
	if _, err := c.PutEnvelope(ctx, profile, stateclient.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	v, err = c.Get(ctx, bob, "profile", "text/plain")
	if err != nil || string(v.Bytes) != `{"city":"Zürich","age":7}` || v.Typename != "example/Profile" {
		t.Fatalf("Get JSON = %+v, %v", v, err)
	}

	// Delete, then nothing is there.
	if _, err := c.Delete(ctx, bob, "name", stateclient.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, bob, "name", ""); !stateclient.IsNotFound(err) {
		t.Fatalf("Get after delete: %v", err)
	}
	if _, err := c.Delete(ctx, bob, "name", stateclient.DeleteOptions{}); !stateclient.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	// DeleteAddress drops the rest.
	if _, err := c.DeleteAddress(ctx, bob, stateclient.DeleteOptions{Reason: "cleanup"}); err != nil {
		t.Fatal(err)
	}
	es, err := c.ListEntries(ctx, bob)
	if err != nil || len(es.Entries) != 0 || len(es.Registered) != 3 {
		t.Fatalf("ListEntries after DeleteAddress: %+v, %v", es, err)
	}
}

func TestErrors(t *testing.T) {
	rt := apptest.Start(t)
	c := rt.Client(t)
	a := person("err")
	rc := mustPut(t, c, a, "visits", "1", "text/plain", stateclient.PutOptions{})

	_, err := c.Put(ctx, a, "visits", []byte("2"), "text/plain", stateclient.PutOptions{IfMatch: "1"})
	var pe *stateclient.ProblemError
	if !stateclient.IsPreconditionFailed(err) || !errors.As(err, &pe) || pe.CurrentVersion != rc.Version || pe.Detail == "" {
		t.Fatalf("stale If-Match: %#v", err)
	}
	if _, err := c.Put(ctx, a, "visits", []byte("2"), "text/plain", stateclient.PutOptions{IfNoneMatch: true}); !stateclient.IsPreconditionFailed(err) {
		t.Fatalf("If-None-Match on a value: %v", err)
	}
	if _, err := c.Put(ctx, a, "visits", []byte("x"), "text/plain", stateclient.PutOptions{Typename: "io.statefun.types/long"}); !stateclient.IsConflict(err) {
		t.Fatalf("a typename other than the registered one: %v", err)
	}
	if _, err := c.Put(ctx, a, "visits", []byte("4x"), "text/plain", stateclient.PutOptions{}); !stateclient.IsInvalidValue(err) {
		t.Fatalf("not an int: %v", err)
	}
	if _, err := c.Put(ctx, a, "unknown", []byte("1"), "text/plain", stateclient.PutOptions{}); !stateclient.IsBadRequest(err) ||
		!strings.Contains(err.Error(), "Statefun-Type") {
		t.Fatalf("no typename: %v", err)
	}
	mustPut(t, c, a, "blob", "\x00\x01", "", stateclient.PutOptions{Typename: "example/Blob"})
	if _, err := c.Get(ctx, a, "blob", "text/plain"); !stateclient.IsNotAcceptable(err) || !errors.As(err, &pe) || len(pe.Available) == 0 {
		t.Fatalf("text of a binary value: %v", err)
	}
	if _, err := c.Get(ctx, person(""), "visits", ""); !errors.Is(err, stateclient.ErrInvalidAddress) {
		t.Fatalf("empty id: %v", err)
	}
	if _, err := c.Put(ctx, a, "visits", []byte("1"), "text/plain", stateclient.PutOptions{Reason: "two\nlines"}); err == nil {
		t.Fatal("a reason with a newline was sent")
	}
	if _, err := c.Receipt(ctx, "no-such-mutation", 0); !stateclient.IsNotFound(err) {
		t.Fatalf("unknown receipt: %v", err)
	}
	if _, err := stateclient.New("ftp://x"); err == nil {
		t.Fatal("New accepted ftp://")
	}
	if c2, err := stateclient.New("127.0.0.1:1/"); err != nil || c2.BaseURL() != "http://127.0.0.1:1" {
		t.Fatalf("New without a scheme: %v", err)
	}
	// A server that is not there: a transport error, not a problem.
	c3, _ := stateclient.New("http://127.0.0.1:1", stateclient.WithTimeout(time.Second))
	if _, err := c3.Get(ctx, a, "visits", ""); err == nil || stateclient.StatusOf(err) != 0 || !strings.HasPrefix(err.Error(), "stateclient: ") {
		t.Fatalf("no server: %v", err)
	}
}

// TestOddIDs: ids with '/', '%', spaces, emoji, dots and query characters
// are one path segment each, and come back as written.
func TestOddIDs(t *testing.T) {
	rt := apptest.Start(t)
	c := rt.Client(t)
	ids := []string{"a/b", "100%", "%2F", "with space", "😀 emoji/😀", ".", "..", "a//b", "/lead", "trail/", "?x=1#y", "a+b;c"}
	for i, id := range ids {
		mustPut(t, c, person(id), "visits", fmt.Sprint(i), "text/plain", stateclient.PutOptions{})
	}
	for i, id := range ids {
		v, err := c.Get(ctx, person(id), "visits", "text/plain")
		if err != nil || string(v.Bytes) != fmt.Sprint(i) {
			t.Errorf("Get %q = %v, %v", id, v, err)
		}
		es, err := c.ListEntries(ctx, person(id))
		if err != nil || es.ID != id || len(es.Entries) != 1 {
			t.Errorf("ListEntries %q = %+v, %v", id, es, err)
		}
	}
	var got []string
	for id, err := range c.AllIDs(ctx, person("").TypeName(), "", "", 3) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	want := append(slices.Clone(ids), "seed")
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("AllIDs = %q\nwant %q", got, want)
	}
	// A state name is a segment too.
	mustPut(t, c, person("x"), "odd/state name", "7", "text/plain", stateclient.PutOptions{Typename: "io.statefun.types/int"})
	if v, err := c.Get(ctx, person("x"), "odd/state name", "text/plain"); err != nil || string(v.Bytes) != "7" {
		t.Fatalf("odd state name: %v, %v", v, err)
	}
}

func TestListing(t *testing.T) {
	rt := apptest.Start(t)
	c := rt.Client(t)
	for i := range 25 {
		mustPut(t, c, person(fmt.Sprintf("p%03d", i)), "visits", "1", "text/plain", stateclient.PutOptions{})
	}
	mustPut(t, c, person("q"), "visits", "1", "text/plain", stateclient.PutOptions{})
	tn := stateclient.TypeName{Namespace: "example", Type: "person"}
	var pages [][]string
	after := ""
	for {
		p, err := c.ListIDs(ctx, tn, "p", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p.IDs)
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if len(pages) != 3 || len(pages[0]) != 10 || len(pages[2]) != 5 || pages[0][0] != "p000" || pages[2][4] != "p024" {
		t.Fatalf("pages %q", pages)
	}
	if p, err := c.ListIDs(ctx, tn, "", "p024", 0); err != nil || !slices.Equal(p.IDs, []string{"q", "seed"}) || p.Next != "" {
		t.Fatalf("after p024: %+v, %v", p, err)
	}
	ts, err := c.ListTypes(ctx, "")
	if err != nil || !slices.Equal(ts.Namespaces, []string{"example"}) || len(ts.Types) != 1 ||
		ts.Types[0] != (stateclient.TypeInfo{Namespace: "example", Type: "person", Registered: true, HoldsState: true, RegisteredStates: 3}) {
		t.Fatalf("ListTypes = %+v, %v", ts, err)
	}
	if ts, err := c.ListTypes(ctx, "nothing"); err != nil || len(ts.Types) != 0 {
		t.Fatalf("ListTypes(nothing) = %+v, %v", ts, err)
	}
	es, err := c.ListEntries(ctx, person("p001"))
	if err != nil || len(es.Entries) != 1 || es.Entries[0].State != "visits" || !es.Entries[0].Registered || es.Entries[0].Size != 5 {
		t.Fatalf("ListEntries = %+v, %v", es, err)
	}
}

func TestAckReceiptRevertAudit(t *testing.T) {
	rt := apptest.Start(t)
	c := rt.Client(t)
	a := person("ann")
	first := mustPut(t, c, a, "visits", "10", "text/plain", stateclient.PutOptions{Reason: "first"})
	rc := mustPut(t, c, a, "visits", "20", "text/plain", stateclient.PutOptions{Ack: stateclient.AckAccepted, Reason: "second"})
	if rc.Status != "accepted" || rc.Checkpoint != nil {
		t.Fatalf("accepted receipt %+v", rc)
	}
	final, err := c.Receipt(ctx, rc.Mutation, 5*time.Second)
	if err != nil || final.Status != "committed" || final.PreviousVersion != first.Version {
		t.Fatalf("Receipt(wait) = %+v, %v", final, err)
	}
	// A queued mutation whose condition fails at apply time ends rejected.
	bad := mustPut(t, c, a, "visits", "99", "text/plain", stateclient.PutOptions{Ack: stateclient.AckAccepted, IfMatch: first.Version})
	if rej, err := c.Receipt(ctx, bad.Mutation, 5*time.Second); err != nil || rej.Status != "rejected" || rej.Reason == "" || rej.Version != final.Version {
		t.Fatalf("rejected receipt = %+v, %v", rej, err)
	}
	applied := mustPut(t, c, a, "visits", "30", "text/plain", stateclient.PutOptions{Ack: stateclient.AckApplied})
	if applied.Status != "applied" {
		t.Fatalf("applied receipt %+v", applied)
	}

	// Revert the last write: back to 20. An ack=applied mutation has a
	// receipt (and can be reverted) once it is committed.
	if _, err := c.Receipt(ctx, applied.Mutation, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	rs, err := c.Revert(ctx, applied.Mutation, "oops")
	if err != nil || len(rs) != 1 || rs[0].Status != "committed" {
		t.Fatalf("Revert = %+v, %v", rs, err)
	}
	if v, _ := c.Get(ctx, a, "visits", "text/plain"); string(v.Bytes) != "20" {
		t.Fatalf("after revert: %s", v.Bytes)
	}
	// Reverting the first write now fails: the entry changed since.
	if _, err := c.Revert(ctx, first.Mutation, ""); !stateclient.IsPreconditionFailed(err) {
		t.Fatalf("stale revert: %v", err)
	}

	recs, err := c.Audit(ctx, stateclient.AuditFilter{Namespace: "example", Type: "person", ID: "ann", State: "visits"})
	if err != nil || len(recs) != 4 {
		t.Fatalf("Audit = %+v, %v", recs, err)
	}
	if recs[0].Reason != "first" || recs[0].Before != nil || recs[0].Principal != "anonymous" || recs[0].Op != "put" {
		t.Fatalf("first record %+v", recs[0])
	}
	if recs[3].Reverts != applied.Mutation || recs[3].Before == nil || !bytes.Equal(recs[3].Before.Value, []byte{0x0D, 30, 0, 0, 0}) {
		t.Fatalf("revert record %+v", recs[3])
	}
	// A reason is UTF-8 text.
	utf := mustPut(t, c, person("zoë"), "visits", "1", "text/plain", stateclient.PutOptions{Reason: "Zürich ✓ 😀"})
	if recs, err := c.Audit(ctx, stateclient.AuditFilter{Mutation: utf.Mutation}); err != nil || len(recs) != 1 || recs[0].Reason != "Zürich ✓ 😀" || recs[0].ID != "zoë" {
		t.Fatalf("Audit of a UTF-8 reason = %+v, %v", recs, err)
	}
	if recs, err := c.Audit(ctx, stateclient.AuditFilter{Mutation: first.Mutation}); err != nil || len(recs) != 1 {
		t.Fatalf("Audit by mutation = %+v, %v", recs, err)
	}
	if recs, err := c.Audit(ctx, stateclient.AuditFilter{Since: time.Now().Add(time.Hour)}); err != nil || len(recs) != 0 {
		t.Fatalf("Audit since the future = %+v, %v", recs, err)
	}
	if recs, err := c.Audit(ctx, stateclient.AuditFilter{ID: "ann", Limit: 2}); err != nil || len(recs) != 2 {
		t.Fatalf("Audit limit = %+v, %v", recs, err)
	}
	// A limit over the server's page size is read page by page.
	all, err := c.Audit(ctx, stateclient.AuditFilter{ID: "ann"})
	if err != nil || len(all) < 4 {
		t.Fatalf("Audit of ann = %+v, %v", all, err)
	}
	defer stateclient.SetMaxAuditPage(2)()
	for _, limit := range []int{3, 1000} {
		paged, err := c.Audit(ctx, stateclient.AuditFilter{ID: "ann", Limit: limit})
		if want := min(limit, len(all)); err != nil || len(paged) != want {
			t.Fatalf("Audit limit %d by pages of 2 = %d records, %v; want %d", limit, len(paged), err, want)
		}
		for i := range paged {
			if paged[i].Mutation != all[i].Mutation || paged[i].State != all[i].State {
				t.Fatalf("Audit by pages: record %d is %+v, want %+v", i, paged[i], all[i])
			}
		}
	}
}

func TestTokensAndTLS(t *testing.T) {
	rt := apptest.Start(t, apptest.WithTokens, apptest.WithTLS(t))
	if !strings.HasPrefix(rt.API, "https://") {
		t.Fatal(rt.API)
	}
	admin := rt.Client(t)
	mustPut(t, admin, person("t"), "visits", "1", "text/plain", stateclient.PutOptions{})
	recs, err := admin.Audit(ctx, stateclient.AuditFilter{ID: "t"})
	if err != nil || len(recs) != 1 || recs[0].Principal != "admin" {
		t.Fatalf("audit principal: %+v, %v", recs, err)
	}
	viewer := rt.Client(t, stateclient.WithToken("viewer-secret-0123456789"))
	if _, err := viewer.Get(ctx, person("t"), "visits", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := viewer.Put(ctx, person("t"), "visits", []byte("2"), "text/plain", stateclient.PutOptions{}); !stateclient.IsForbidden(err) {
		t.Fatalf("viewer write: %v", err)
	}
	anon := rt.Client(t, stateclient.WithToken(""))
	if _, err := anon.Get(ctx, person("t"), "visits", ""); !stateclient.IsUnauthorized(err) {
		t.Fatalf("no token: %v", err)
	}
	// Without the CA the TLS handshake fails.
	plain, _ := stateclient.New(rt.API, stateclient.WithToken(rt.Token))
	if _, err := plain.Get(ctx, person("t"), "visits", ""); err == nil || stateclient.StatusOf(err) != 0 {
		t.Fatalf("untrusted certificate: %v", err)
	}
}
