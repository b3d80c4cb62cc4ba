package refusals

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// A topic Kafka does not host refuses every record; a record over a
// topic's limit refuses every record as large; a refusal that may pass
// (a timeout) is not remembered; each expires after the TTL.
func TestGuard(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	g := New(Config{TTL: time.Minute, Now: c.Now})
	if err := g.Check("out", 10); err != nil {
		t.Fatalf("a new guard refuses: %v", err)
	}
	if kept, isNew := g.Refused("missing", 10, fmt.Errorf("produce: %w", kerr.UnknownTopicOrPartition)); !kept || !isNew {
		t.Fatalf("an unknown topic: kept %v, new %v; want both", kept, isNew)
	}
	if _, isNew := g.Refused("missing", 99, kerr.UnknownTopicOrPartition); isNew {
		t.Error("the same refusal again is new")
	}
	if err := g.Check("missing", 1); err == nil || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Errorf("Check of the unknown topic: %v; want the refusal", err)
	}
	if kept, _ := g.Refused("big", 5000, kerr.MessageTooLarge); !kept {
		t.Fatal("a record too large is not kept")
	}
	g.Refused("big", 7000, kerr.MessageTooLarge) // a larger one says no more
	for size, refused := range map[int]bool{4999: false, 5000: true, 9000: true} {
		if err := g.Check("big", size); (err != nil) != refused {
			t.Errorf("Check(big, %d) = %v; want refused %v", size, err, refused)
		}
	}
	if kept, _ := g.Refused("slow", 10, kerr.RequestTimedOut); kept {
		t.Error("a timeout is kept: it may pass next time")
	}
	if err := g.Check("slow", 10); err != nil {
		t.Errorf("a topic with a timeout refuses: %v", err)
	}

	c.now = c.now.Add(time.Minute)
	if err := g.Check("missing", 1); err != nil {
		t.Errorf("after the TTL the topic is still refused: %v", err)
	}
	if _, isNew := g.Refused("missing", 10, kerr.UnknownTopicOrPartition); !isNew {
		t.Error("a refusal after the TTL is not new")
	}
}

// Functions choose their egress topics: the guard keeps at most
// MaxTopics, the first to expire going first.
func TestGuardIsBounded(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	g := New(Config{TTL: time.Minute, MaxTopics: 3, Now: c.Now})
	for i := range 10 {
		c.now = c.now.Add(time.Second)
		g.Refused(fmt.Sprintf("t%d", i), 1, kerr.UnknownTopicOrPartition)
	}
	if n := len(g.topic); n != 3 {
		t.Fatalf("%d topics kept; want 3", n)
	}
	for i := range 10 {
		err := g.Check(fmt.Sprintf("t%d", i), 1)
		if want := i >= 7; (err != nil) != want {
			t.Errorf("t%d refused: %v; want %v (the last three)", i, err, want)
		}
	}
	var nilGuard *Guard
	if err := nilGuard.Check("t9", 1); err != nil {
		t.Errorf("a nil guard refuses: %v", err)
	}
	if whole, size := Deterministic(errors.New("other")); whole || size {
		t.Error("an unknown error counts as deterministic")
	}
}
