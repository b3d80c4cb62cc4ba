package kafkaegress

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/protocol"
)

// marker is the value of a position record in the marker topic. It is JSON
// so that an operator can read it with any Kafka tool. Fields beyond Egress
// and Position were added later: a marker without them was written by an
// older build (see judge).
type marker struct {
	// Egress is the egress id, for the reader's benefit (the key is the
	// transactional id).
	Egress string `json:"egress"`
	// Position is the highest outbox position the transaction delivered.
	Position uint64 `json:"position"`
	// Store is the identity of the store whose outbox the batch came from.
	Store string `json:"store,omitempty"`
	// After is the position the batch started after (the previous marker).
	After uint64 `json:"after,omitempty"`
	// Records is how many outbox records the batch covered, and Digest a
	// hash of them (positions and values): what a restart checks the
	// records it still holds at or below Position against.
	Records int    `json:"records,omitempty"`
	Digest  string `json:"digest,omitempty"`
	// Reset, on the marker that replaced another store's, records which
	// one, when and on whose word.
	Reset *resetNote `json:"reset,omitempty"`
}

// resetNote is the record of an operator's reset of a marker.
type resetNote struct {
	Replaced string    `json:"replaced"` // the replaced marker, as a MarkerRef
	At       time.Time `json:"at"`
	By       string    `json:"by,omitempty"`
}

// ref is the marker's MarkerRef.
func (m *marker) ref() MarkerRef { return MarkerRef{Store: m.Store, Position: m.Position} }

// MarkerRef names a position marker: the identity of the store that wrote
// it ("" for a marker without one, written by an older build) and its
// position. Its text form is "<store>@<position>", with "none" for no
// store: what a refusal prints and --kafka-egress-reset-marker takes.
type MarkerRef struct {
	Store    string
	Position uint64
}

// String is the text form ParseMarkerRef reads.
func (m MarkerRef) String() string {
	s := m.Store
	if s == "" {
		s = "none"
	}
	return fmt.Sprintf("%s@%d", s, m.Position)
}

// ParseMarkerRef reads "<store>@<position>" (store "none" for a marker
// without a store identity).
func ParseMarkerRef(s string) (MarkerRef, error) {
	store, p, ok := strings.Cut(s, "@")
	pos, err := strconv.ParseUint(p, 10, 64)
	if !ok || err != nil || store == "" {
		return MarkerRef{}, fmt.Errorf("marker %q: want <store>@<position>, as the refusal prints it", s)
	}
	if store == "none" {
		store = ""
	}
	return MarkerRef{Store: store, Position: pos}, nil
}

// batchDigest hashes the outbox records of a batch: position, typename and
// value of each, in order.
type batchDigest struct {
	h hash.Hash
	n int
}

func newDigest() *batchDigest { return &batchDigest{h: sha256.New()} }

func (d *batchDigest) add(pos uint64, rec *protocol.EgressRecord) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], pos)
	d.h.Write(b[:])
	arg := rec.GetArgument()
	for _, f := range [][]byte{[]byte(arg.GetTypename()), arg.GetValue()} {
		binary.BigEndian.PutUint32(b[:4], uint32(len(f)))
		d.h.Write(b[:4])
		d.h.Write(f)
	}
	d.n++
}

func (d *batchDigest) sum() string { return hex.EncodeToString(d.h.Sum(nil)[:16]) }

// markerRecord is the position record a transaction ends with.
func (r *Relay) markerRecord(m marker) *kgo.Record {
	m.Egress = r.cfg.ID
	if r.cfg.Store != nil {
		m.Store = r.cfg.Store.ID()
	}
	v, _ := json.Marshal(m)
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
// the last marker committed under this relay's transactional id (nil when
// there is none, or the last record of the key is a tombstone: an operator
// deleted the marker). Call it after the producer is fenced in
// (InitProducerID): every earlier transaction of this id is then complete,
// so the end offsets taken now lie beyond all of its markers.
func (r *Relay) readMarker(ctx context.Context, prod *kgo.Client) (*marker, error) {
	ends, err := kadm.NewClient(prod).ListEndOffsets(ctx, r.cfg.MarkerTopic)
	if err != nil {
		return nil, fmt.Errorf("listing the end of the marker topic %s: %w", r.cfg.MarkerTopic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("listing the end of the marker topic %s: %w", r.cfg.MarkerTopic, err)
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
		return nil, nil
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
		return nil, fmt.Errorf("the marker reader: %w", err)
	}
	defer cons.Close()
	key := r.cfg.TransactionalID
	var last *marker
	for len(want) > 0 {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading the marker topic %s: %w", r.cfg.MarkerTopic, err)
		}
		for _, fe := range fs.Errors() {
			return nil, fmt.Errorf("reading the marker topic %s partition %d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		var bad error
		fs.EachRecord(func(rec *kgo.Record) {
			if end, ok := want[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(want, rec.Partition)
			}
			if rec.Attrs.IsControl() || string(rec.Key) != key {
				return
			}
			if rec.Value == nil { // a tombstone: the marker was deleted
				last = nil
				return
			}
			m := new(marker)
			if err := json.Unmarshal(rec.Value, m); err != nil {
				bad = fmt.Errorf("the marker at %s/%d@%d does not decode: %v", rec.Topic, rec.Partition, rec.Offset, err)
				return
			}
			if m.Egress != r.cfg.ID {
				bad = fmt.Errorf("the marker at %s/%d@%d under transactional id %s belongs to egress %s, not %s: two egresses share a transactional id",
					rec.Topic, rec.Partition, rec.Offset, key, m.Egress, r.cfg.ID)
				return
			}
			// The last one wins, as compaction keeps it: markers of one
			// transactional id are written in order, and an operator's
			// reset writes one with a lower position.
			last = m
		})
		if bad != nil {
			return nil, bad
		}
	}
	return last, nil
}
