// Package engine is the embedded shell around the partition cores: a
// runner (mailbox goroutine) per partition, the group committer writing to
// the Pebble store, the dispatch of remote-function calls, egress popping
// and the distribution of learned specs.
//
// Each part sits behind a small seam: package committer knows requests and
// batches, not partitions; package dispatch knows invocations and a
// completion callback; package mailbox is the event queue; a runner hands
// its core's effects to the effects interface. With Options.Driven no
// goroutine runs and a Driver steps every part on the caller's goroutine.
// docs/explanation/engine.md has the map, the goroutines, the lock order and the
// commit/durability contract.
//
// Nothing leaves a partition before the commit that produced it is durable:
// messages for other partitions, committed receipts and learned specs are
// released by the commit request's Durable, after the sync.
//
// An *Engine serves five roles, and each consumer depends on the small
// interface it defines for its role, not on *Engine (surface_test.go
// checks both the roles and that):
//
//   - the partition host: New, Start, Close, Err, Failed, Partitions, and
//     Driver for a Driven engine (internal/app builds and holds it);
//   - ingest: Ingest and IngestOnce (ingress.Sink), IngestFrom and
//     SourcePositions (kafkaingress.Engine);
//   - the egress outbox: PopEgress, ReadEgress, ReadEgressBatch and
//     AckEgress (egress.Source, kafkaegress.Outbox);
//   - the state API's partition work, in the mailbox order of the
//     partition that owns an address: Read, Mutate, WaitReceipt, the
//     registered specs, WaitDurable, the repair loop and QueuedByType
//     (stateapi.Engine), and in cluster mode PutJob, a bulk job's record
//     written by its home partition's commit (stateapi's cluster jobs);
//     CallLatencies gives a bulk job's pace the round trips of the
//     latest calls to remote functions (jobs.Engine), so that the job
//     yields when the functions slow down.
//     The committed records the API reads directly —
//     receipts, audit, history, listings, dead letters — are the store's:
//     Reads hands it the store read-only (stateapi.Store);
//   - the cluster seam (cluster.go): Options.Durability (the cluster
//     session) makes the requests durable, Options.Outbound takes what
//     leaves a partition, Assign and Revoke say which partitions run, Full
//     paces the fetching, and SubmitArrivals brings in the messages topic's
//     records (node.Engine, which the node hands the session).
package engine
