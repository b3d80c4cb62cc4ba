package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// splitBrokers splits a comma-separated bootstrap list.
func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// ProduceLogins produces each non-empty line of in, a UserLogin as JSON, to
// topic, keyed by its user_id (the id of the user function it reaches). It
// returns how many records Kafka acknowledged. A line that is not a login
// with a user_id is refused with its line number before anything is sent.
func ProduceLogins(ctx context.Context, brokers []string, topic string, in io.Reader) (int, error) {
	var recs []*kgo.Record
	sc := bufio.NewScanner(in)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var l UserLogin
		if err := json.Unmarshal(text, &l); err != nil {
			return 0, fmt.Errorf("produce: line %d: not a login: %v", line, err)
		}
		if l.UserID == "" {
			return 0, fmt.Errorf("produce: line %d: user_id is missing or empty", line)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(l.UserID), Value: bytes.Clone(text)})
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("produce: %w", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, fmt.Errorf("produce: %w", err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("produce: %w", err)
	}
	return len(recs), nil
}

// Consume reads topic from its beginning with isolation.level
// read_committed — only what committed transactions wrote — and calls f
// with each record's key and value, until n records were seen (n > 0) or
// ctx ends.
func Consume(ctx context.Context, brokers []string, topic string, n int, f func(key, value string)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	defer cl.Close()
	seen := 0
	for n <= 0 || seen < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			if n > 0 {
				return fmt.Errorf("consume: %d of %d records from %s: %w", seen, n, topic, ctx.Err())
			}
			return nil
		}
		// Other fetch errors (a topic not created yet, a broker
		// reconnecting) are retried by the client.
		fs.EachRecord(func(r *kgo.Record) {
			if n <= 0 || seen < n {
				f(string(r.Key), string(r.Value))
				seen++
			}
		})
	}
	return nil
}
