package engine

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// The records a commit hands to the store are filled into one reused set:
// after the first write sized it, a state change's history record, an
// audit record and a receipt allocate nothing, and each holds what the
// write says.
func TestEncodeScratchFillsRecordsWithoutAllocating(t *testing.T) {
	caller := address.Address{Type: counterType, ID: "sender"}
	w := partition.StateWrite{Addr: addr("a"), State: "n", At: 1700,
		Entry: partition.Entry{Typename: countTypename, Value: []byte("7"), Version: 3, ExpiresAt: 99},
		Cause: &partition.Cause{Kind: partition.CauseInvocation, MessageCount: 3,
			Messages: []partition.CauseMessage{{Typename: "t/in"}, {Typename: "t/msg", Caller: &caller}}}}
	a := partition.AuditRecord{Mutation: "m1", At: 1700, Principal: "ops", Reason: "fix", Addr: addr("a"), State: "n",
		Op: partition.OpPut, Version: 3, Typename: countTypename,
		Before: &partition.Entry{Typename: countTypename, Value: []byte("6"), Version: 2}}
	rc := partition.Receipt{Mutation: "m1", Addr: addr("a"), State: "n", Checkpoint: 12, Version: 3, PreviousVersion: 2, At: 1700}

	var s encodeScratch
	target := &protocol.Address{Namespace: counterType.Namespace, Type: counterType.Name, Id: "a"}
	wantHist := &protocol.HistoryRecord{At: 1700, Version: 3, Typename: countTypename, Value: []byte("7"), ExpiresAt: 99,
		Cause: &protocol.HistoryCause{Kind: int32(partition.CauseInvocation), MessageCount: 3, Messages: []*protocol.HistoryMessage{
			{Typename: "t/in"}, {Typename: "t/msg", Caller: &protocol.Address{Namespace: counterType.Namespace, Type: counterType.Name, Id: "sender"}}}}}
	if got := s.history(w); !proto.Equal(got, wantHist) {
		t.Errorf("history record\n got %v\nwant %v", got, wantHist)
	}
	wantAudit := &protocol.AuditRecord{Mutation: "m1", At: 1700, Principal: "ops", Reason: "fix", Target: target, State: "n",
		Op: int32(partition.OpPut), Version: 3, Typename: countTypename,
		HadBefore: true, BeforeTypename: countTypename, BeforeValue: []byte("6"), BeforeVersion: 2, Partition: proto.Uint32(5)}
	if got := s.auditRecord(a, 5); !proto.Equal(got, wantAudit) {
		t.Errorf("audit record\n got %v\nwant %v", got, wantAudit)
	}
	wantReceipt := &protocol.Receipt{Mutation: "m1", Status: "committed", Target: target, State: "n",
		Checkpoint: 12, Version: 3, PreviousVersion: 2, At: 1700, Partition: proto.Uint32(5)}
	if got := s.receiptRecord(rc, 5); !proto.Equal(got, wantReceipt) {
		t.Errorf("receipt\n got %v\nwant %v", got, wantReceipt)
	}
	// A deletion carries no entry, and a later write with fewer messages
	// none of the earlier one's.
	del := partition.StateWrite{Addr: addr("a"), State: "n", Delete: true, At: 1800,
		Cause: &partition.Cause{Kind: partition.CauseMutation, Mutation: "m2", Principal: "ops"}}
	wantDel := &protocol.HistoryRecord{At: 1800, Deleted: true,
		Cause: &protocol.HistoryCause{Kind: int32(partition.CauseMutation), Mutation: "m2", Principal: "ops"}}
	if got := s.history(del); !proto.Equal(got, wantDel) {
		t.Errorf("deletion's history record\n got %v\nwant %v", got, wantDel)
	}

	var buf []byte
	allocs := testing.AllocsPerRun(100, func() {
		buf, _ = proto.MarshalOptions{}.MarshalAppend(buf[:0], s.history(w))
		buf, _ = proto.MarshalOptions{}.MarshalAppend(buf[:0], s.auditRecord(a, 5))
		buf, _ = proto.MarshalOptions{}.MarshalAppend(buf[:0], s.receiptRecord(rc, 5))
	})
	if allocs != 0 {
		t.Errorf("filling and marshalling a history record, an audit record and a receipt: %.1f allocations, want 0", allocs)
	}
}
