package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/testport"
)

// controlCall sends method to the control listener's path and returns the
// status and body.
func controlCall(t *testing.T, base, method, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestControlFaults: a fault installed through the -control listener
// fails the next EndTxn commits with the error asked for, and only those;
// its hits are counted, and once removed the cluster behaves again. Bad
// requests are refused with the reason. Coordinators move on request and a
// transaction still commits after.
func TestControlFaults(t *testing.T) {
	port, err := testport.Free()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	boot, log, stop := start(t, "-port", "0", "-brokers", "3", "-topic", "in:2", "-control", addr)
	base := "http://" + addr

	for _, bad := range []struct{ path, want string }{
		{"/faults?key=Nope", `key "Nope": want a Kafka request name`},
		{"/faults?key=EndTxn&error=NOPE", `error "NOPE": want a Kafka error name`},
		{"/faults?key=EndTxn&count=0", `count "0"`},
		{"/faults?key=Heartbeat&commit=true", `commit "true": want true or false, with key=EndTxn`},
	} {
		if status, body := controlCall(t, base, http.MethodPost, bad.path); status != http.StatusBadRequest || !strings.Contains(body, bad.want) {
			t.Errorf("POST %s: %d %q; want 400 with %q", bad.path, status, body, bad.want)
		}
	}

	status, body := controlCall(t, base, http.MethodPost, "/faults?key=EndTxn&error=TRANSACTION_ABORTABLE&count=2&commit=true")
	var created struct{ ID int }
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &created) != nil || created.ID == 0 {
		t.Fatalf("POST /faults: %d %q", status, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := newClient(t, boot, kgo.TransactionalID("control-test"))
	txn := func(commit kgo.TransactionEndTry) error {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: "in", Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		err := p.EndTransaction(ctx, commit)
		if err != nil {
			// The documented way on: end again as an abort.
			if err2 := p.EndTransaction(ctx, kgo.TryAbort); err2 != nil {
				t.Fatalf("aborting after %v: %v", err, err2)
			}
		}
		return err
	}
	if err := txn(kgo.TryAbort); err != nil {
		t.Errorf("an abort failed, but the fault is on commits only: %v", err)
	}
	for i := range 2 {
		if err := txn(kgo.TryCommit); !errors.Is(err, kerr.TransactionAbortable) {
			t.Errorf("commit %d: %v, want TRANSACTION_ABORTABLE from the fault", i, err)
		}
	}
	if err := txn(kgo.TryCommit); err != nil {
		t.Errorf("the third commit, after the fault's count: %v", err)
	}
	var got injected
	status, body = controlCall(t, base, http.MethodGet, fmt.Sprintf("/faults/%d", created.ID))
	if status != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil || got.Hits != 2 || got.Key != "EndTxn" || got.Error != "TRANSACTION_ABORTABLE" || got.Count != 2 {
		t.Errorf("GET /faults/%d: %d %q; want 2 hits of EndTxn TRANSACTION_ABORTABLE", created.ID, status, body)
	}

	// A fault until removed, removed: the commit goes through.
	status, body = controlCall(t, base, http.MethodPost, "/faults?key=EndTxn&count=-1")
	if status != http.StatusCreated || json.Unmarshal([]byte(body), &created) != nil {
		t.Fatalf("POST /faults: %d %q", status, body)
	}
	if err := txn(kgo.TryCommit); err == nil {
		t.Error("a commit went through an EndTxn fault without limit")
	}
	if status, _ := controlCall(t, base, http.MethodDelete, fmt.Sprintf("/faults/%d", created.ID)); status != http.StatusNoContent {
		t.Errorf("DELETE: %d", status)
	}
	if status, _ := controlCall(t, base, http.MethodGet, fmt.Sprintf("/faults/%d", created.ID)); status != http.StatusNotFound {
		t.Errorf("GET of a removed fault: %d, want 404", status)
	}
	if status, body := controlCall(t, base, http.MethodPost, "/coordinators/move"); status != http.StatusNoContent {
		t.Errorf("POST /coordinators/move: %d %q", status, body)
	}
	if err := txn(kgo.TryCommit); err != nil {
		t.Errorf("a commit after the faults were removed and the coordinators moved: %v", err)
	}
	if n := len(consumeAll(t, boot, "in", 2)); n < 2 {
		t.Errorf("read %d committed records, want the 2 committed", n)
	}
	stop()
	if !strings.Contains(log.String(), "fault injection enabled") {
		t.Errorf("the log does not say fault injection is on:\n%s", log.String())
	}
}
