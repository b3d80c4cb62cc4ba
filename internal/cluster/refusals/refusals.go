// Package refusals remembers which records Kafka refused to take from a
// node's transactions for a reason that holds for every later record like
// them: a topic that does not exist, is not a valid name or may not be
// written, or a record over the topic's size limit. The cluster session
// tells it each refusal; the Kafka egress's route asks it about every
// record a function sends, so that the next such record is refused where
// it is made — a protocol violation of the one function response, which
// the poison policy sees — instead of aborting the node's transaction,
// with every other partition's work, again and again (docs/explanation/cluster.md,
// "One refused record").
//
// An entry expires after TTL: a topic created meanwhile, or a limit
// raised, is then tried again, at the cost of at most one aborted
// transaction per TTL while it still refuses.
package refusals

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Defaults of Config's zero values.
const (
	// DefaultTTL is how long a refusal is remembered.
	DefaultTTL = time.Minute
	// DefaultMaxTopics bounds the topics remembered: functions choose the
	// topics of their egress records, so the set must not grow with them.
	DefaultMaxTopics = 1024
)

// Config configures a Guard. Zero values mean the defaults.
type Config struct {
	TTL       time.Duration
	MaxTopics int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Guard holds the refusals of one node. Its methods are safe for
// concurrent use.
type Guard struct {
	cfg Config

	mu    sync.Mutex
	topic map[string]refusal
}

// refusal is what Kafka refused of one topic.
type refusal struct {
	whole   error // every record of the topic (unknown, invalid, not authorized)
	size    int   // records of at least this many bytes (key and value), if > 0
	sizeErr error
	until   time.Time
}

// New returns a Guard with no refusals.
func New(cfg Config) *Guard {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.MaxTopics <= 0 {
		cfg.MaxTopics = DefaultMaxTopics
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Guard{cfg: cfg, topic: map[string]refusal{}}
}

// Deterministic reports whether err, a produce error of one record, holds
// for every later record like it: for every record of the topic (whole),
// or for every record at least as large (size).
func Deterministic(err error) (whole, size bool) {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition),
		errors.Is(err, kerr.InvalidTopicException),
		errors.Is(err, kerr.TopicAuthorizationFailed):
		return true, false
	case errors.Is(err, kerr.MessageTooLarge),
		errors.Is(err, kerr.RecordListTooLarge):
		return false, true
	}
	return false, false
}

// Refused records that Kafka refused a record of size bytes (key and
// value) for topic with err. It reports whether the refusal is one a
// later record is refused for (Deterministic), and whether it is new: the
// topic had no such refusal in force (to log it once).
func (g *Guard) Refused(topic string, size int, err error) (remembered, isNew bool) {
	whole, bySize := Deterministic(err)
	if !whole && !bySize {
		return false, false
	}
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.topic[topic]
	if ok && !now.Before(r.until) {
		r, ok = refusal{}, false
	}
	if !ok && len(g.topic) >= g.cfg.MaxTopics {
		g.evictLocked(now)
	}
	switch {
	case whole:
		isNew = r.whole == nil
		r.whole = err
	case r.size == 0 || size < r.size:
		isNew = r.size == 0
		r.size, r.sizeErr = size, err
	}
	r.until = now.Add(g.cfg.TTL)
	g.topic[topic] = r
	return true, isNew
}

// evictLocked makes room for one topic: the expired ones go, or else the
// one that expires first.
func (g *Guard) evictLocked(now time.Time) {
	var first string
	var at time.Time
	for t, r := range g.topic {
		if !now.Before(r.until) {
			delete(g.topic, t)
			continue
		}
		if first == "" || r.until.Before(at) {
			first, at = t, r.until
		}
	}
	if len(g.topic) >= g.cfg.MaxTopics {
		delete(g.topic, first)
	}
}

// Check returns why a record of size bytes (key and value) for topic
// would be refused, going by the refusals in force, or nil. A nil Guard
// refuses nothing.
func (g *Guard) Check(topic string, size int) error {
	if g == nil {
		return nil
	}
	now := g.cfg.Now()
	g.mu.Lock()
	r, ok := g.topic[topic]
	g.mu.Unlock()
	switch {
	case !ok || !now.Before(r.until):
		return nil
	case r.whole != nil:
		return fmt.Errorf("Kafka refuses records for topic %s (%v); refused here until %s, when it is tried again", topic, r.whole, r.until.UTC().Format(time.RFC3339))
	case r.size > 0 && size >= r.size:
		return fmt.Errorf("Kafka refused a record of %d bytes for topic %s (%v), and this one has %d; the topic's max.message.bytes (or the brokers' message.max.bytes) is below the producer's limit", r.size, topic, r.sizeErr, size)
	}
	return nil
}
