// Package sim holds the deterministic simulation of the engine, embedded
// and in cluster mode (its tests only): the real engine and partition
// cores, on Pebble's crashable in-memory filesystem behind its
// error-injecting one, driven on one goroutine through engine.Driver by a
// seeded random schedule of messages, delayed messages, state mutations in
// every ack mode, reads, function failures and protocol violations, egress
// pops, store errors, crashes and restarts — in cluster mode on the
// cluster session's test double over an in-memory Kafka, which drives the
// commit cycle's state machine as the real session does, with aborted
// transactions, partition moves, restores, revocations and losses in the
// middle of a transaction, a fenced zombie and a stalled member — and
// checked against a small reference model. docs/explanation/testing.md says what it
// covers, how to run it and how to reproduce a seed.
package sim
