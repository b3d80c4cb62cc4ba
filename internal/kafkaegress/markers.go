package kafkaegress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// marker is the value of a position record in the marker topic. It is JSON
// so that an operator can read it with any Kafka tool.
type marker struct {
	// Egress is the egress id, for the reader's benefit (the key is the
	// transactional id).
	Egress string `json:"egress"`
	// Position is the highest outbox position the transaction delivered.
	Position uint64 `json:"position"`
}

// markerRecord is the position record a transaction ends with.
func (r *Relay) markerRecord(pos uint64) *kgo.Record {
	v, _ := json.Marshal(marker{Egress: r.cfg.ID, Position: pos})
	return &kgo.Record{Topic: r.cfg.MarkerTopic, Key: []byte(r.cfg.TransactionalID), Value: v}
}

// ensureMarkerTopic creates the marker topic when it is missing: one
// partition, compacted, the brokers' default replication.
func (r *Relay) ensureMarkerTopic(ctx context.Context, cl *kgo.Client) error {
	adm := kadm.NewClient(cl)
	compact := "compact"
	_, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, r.cfg.MarkerTopic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating the marker topic %s: %w", r.cfg.MarkerTopic, err)
	}
	return nil
}

// readMarker reads the marker topic to its end, read_committed, and returns
// the last position committed under this relay's transactional id (found
// false when there is none). Call it after the producer is fenced in
// (InitProducerID): every earlier transaction of this id is then complete,
// so the end offsets taken now lie beyond all of its markers.
func (r *Relay) readMarker(ctx context.Context, prod *kgo.Client) (pos uint64, found bool, err error) {
	ends, err := kadm.NewClient(prod).ListEndOffsets(ctx, r.cfg.MarkerTopic)
	if err != nil {
		return 0, false, fmt.Errorf("listing the end of the marker topic %s: %w", r.cfg.MarkerTopic, err)
	}
	if err := ends.Error(); err != nil {
		return 0, false, fmt.Errorf("listing the end of the marker topic %s: %w", r.cfg.MarkerTopic, err)
	}
	want := map[int32]int64{} // partition → end offset still to reach
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			from[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return 0, false, nil
	}
	opts := append(append([]kgo.Opt(nil), r.cfg.ClientOpts...),
		kgo.SeedBrokers(r.cfg.Brokers...),
		kgo.WithHooks(r.hooks()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) carry offsets too: with
		// them the reader sees the offset just below the end even when
		// the topic ends with a commit or abort marker.
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.MarkerTopic: from}),
	)
	cons, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, false, fmt.Errorf("the marker reader: %w", err)
	}
	defer cons.Close()
	key := r.cfg.TransactionalID
	for len(want) > 0 {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, false, fmt.Errorf("reading the marker topic %s: %w", r.cfg.MarkerTopic, err)
		}
		for _, fe := range fs.Errors() {
			return 0, false, fmt.Errorf("reading the marker topic %s partition %d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		var bad error
		fs.EachRecord(func(rec *kgo.Record) {
			if end, ok := want[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(want, rec.Partition)
			}
			if rec.Attrs.IsControl() || string(rec.Key) != key {
				return
			}
			var m marker
			if err := json.Unmarshal(rec.Value, &m); err != nil {
				bad = fmt.Errorf("the marker at %s/%d@%d does not decode: %v", rec.Topic, rec.Partition, rec.Offset, err)
				return
			}
			if m.Egress != r.cfg.ID {
				bad = fmt.Errorf("the marker at %s/%d@%d under transactional id %s belongs to egress %s, not %s: two egresses share a transactional id",
					rec.Topic, rec.Partition, rec.Offset, key, m.Egress, r.cfg.ID)
				return
			}
			pos, found = max(pos, m.Position), true
		})
		if bad != nil {
			return 0, false, bad
		}
	}
	return pos, found, nil
}
