package engine

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/partition"
)

// Every answered state request is counted in statefun_state_request_seconds
// under its kind: an operator (and the state-API benchmark) reads it to
// tell the runtime's share of a slow answer from the network's.
func TestStateRequestLatencyMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	db := openStore(t, vfs.NewMem(), 2)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.Metrics = NewMetrics(reg) })
	e.Start()
	ctx := context.Background()
	for i, ack := range []partition.AckMode{AckCommitted, AckCommitted, AckApplied, AckAccepted} {
		m := partition.Mutation{ID: "m" + string(rune('a'+i)), Addr: addr("m"), State: "n", Op: partition.OpPut,
			Typename: countTypename, Value: []byte("5"), Ack: ack}
		if _, err := e.Mutate(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if got := count(t, e, "m"); got != "5" {
			t.Fatalf("read %q, want 5", got)
		}
	}
	want := map[string]uint64{"read": 3, "committed": 2, "applied": 1, "accepted": 1}
	got := map[string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "statefun_state_request_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("statefun_state_request_seconds{kind=%q} counted %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
}
