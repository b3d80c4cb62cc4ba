// Package engine is the embedded shell around the partition cores: one
// goroutine per partition (its mailbox), one group committer writing to the
// Pebble store, and the invocation of remote functions.
//
// Goroutines (all started by Start, all stopped by Close):
//
//   - partitionLoop, one per partition: steps its core, sends invocations,
//     hands commits to the committer, wakes up for timers.
//   - commitLoop: gathers the commit requests that are waiting into one
//     synced Pebble batch (group commit), then, once durable, delivers
//     messages to other partitions, answers ingress callers and tells each
//     partition its commit is durable.
//   - callWorker, as many as there are invocations in flight (at most one
//     per address); a worker that finds no work for 30s exits.
//
// Nothing leaves a partition before the commit that produced it is durable:
// messages for other partitions are delivered by commitLoop after the sync.
package engine
