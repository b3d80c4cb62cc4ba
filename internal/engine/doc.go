// Package engine is the embedded shell around the partition cores: a
// runner (mailbox goroutine) per partition, the group committer writing to
// the Pebble store, the dispatch of remote-function calls, egress popping,
// the distribution of learned specs and the façade the state API uses.
//
// Each part sits behind a small seam: package committer knows requests and
// batches, not partitions; package dispatch knows invocations and a
// completion callback; package mailbox is the event queue; a runner hands
// its core's effects to the effects interface. With Options.Driven no
// goroutine runs and a Driver steps every part on the caller's goroutine.
// docs/engine.md has the map, the goroutines, the lock order and the
// commit/durability contract.
//
// Nothing leaves a partition before the commit that produced it is durable:
// messages for other partitions, committed receipts and learned specs are
// released by the commit request's Durable, after the sync.
//
// In cluster mode (cluster.go) the same engine runs the partitions a Kafka
// consumer group assigns to the process: Options.Durability (the cluster
// session) makes the requests durable, Options.Outbound takes what leaves
// a partition, Assign and Revoke say which partitions run, and
// SubmitArrivals brings in the messages topic's records.
package engine
