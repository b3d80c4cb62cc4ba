package engine

import (
	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
)

// historyRecord is the stored history record of one state write of a
// commit: the entry after it (or its deletion) and its cause.
func historyRecord(w partition.StateWrite) *protocol.HistoryRecord {
	r := &protocol.HistoryRecord{At: w.At, Deleted: w.Delete, Cause: causeToProto(w.Cause)}
	if !w.Delete {
		r.Version, r.Typename, r.Value, r.ExpiresAt = w.Entry.Version, w.Entry.Typename, w.Entry.Value, w.Entry.ExpiresAt
	}
	return r
}

func causeToProto(c *partition.Cause) *protocol.HistoryCause {
	p := &protocol.HistoryCause{Kind: int32(c.Kind), MessageCount: int32(c.MessageCount),
		Mutation: c.Mutation, Principal: c.Principal, Reason: c.Reason, Reverts: c.Reverts}
	for _, m := range c.Messages {
		hm := &protocol.HistoryMessage{Typename: m.Typename}
		if m.Caller != nil {
			hm.Caller = toProtoAddr(*m.Caller)
		}
		p.Messages = append(p.Messages, hm)
	}
	return p
}
