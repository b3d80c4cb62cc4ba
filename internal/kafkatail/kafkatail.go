// Package kafkatail reads a Kafka topic read_committed from its start in
// the background, noting when each record was read: how the tests and
// benchmarks of cluster mode watch an output topic as its consumers see
// it, to tell when an effect became visible.
package kafkatail

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Start reads topic on brokers from its start, read_committed, and calls
// fn with each record and the time its fetch was read, in offset order
// within a partition, on one goroutine. Fetches wait at most wait for
// records, which bounds how late a record's time can be. The returned stop
// ends the reading and waits for it.
func Start(brokers []string, topic string, wait time.Duration, fn func(r *kgo.Record, at time.Time)) (stop func(), err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(wait))
	if err != nil {
		return nil, fmt.Errorf("kafkatail: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			at := time.Now()
			fs.EachRecord(func(r *kgo.Record) { fn(r, at) })
		}
	}()
	return func() { cancel(); <-done; cl.Close() }, nil
}
