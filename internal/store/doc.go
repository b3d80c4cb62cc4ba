// Package store is the embedded store: one Pebble database per process
// holding every key space of the runtime — state entries, partition inboxes,
// delayed-message timers, registered specs, partition meta and egress
// outboxes.
//
// The partition state machines never touch it. The engine reads from it (on
// start, to rebuild each partition; the state API, to browse) and writes one
// atomic Batch per group commit, synced when the commit must be durable
// before its effects leave the partition (docs/explanation/engine.md).
//
// The on-disk layout is the contract of this package: docs/reference/storage.md
// describes it, and each encoder carries the box diagram of its layout.
// Every constant marked "part of the file format" is fixed for good.
//
// File map:
//
//	doc.go      this overview
//	db.go       Options, Open and its format and partition-count checks, Close
//	strenc.go   the order-preserving escape encoding of strings inside keys
//	keys.go     the key spaces and each key's encoder, decoder and diagram
//	values.go   Entry and the state entry value layout; meta values; protobuf
//	read.go     point reads and scans
//	batch.go    Batch: the writes of one atomic commit
//	changelog.go cluster mode: Batch.Ops, changelog positions and key index, apply and drop
//	errors.go   ErrCorrupt, CorruptionError and the Open errors
//	health.go   disk faults: Health, Failed, the Fatalf interception
//	identity.go the store's identity, its directory's watch, lost stores at Open
//	prealloc.go write-ahead log files preallocated 1 MiB at a time
//	retention.go Retention, Sweep, the audit index backfill
//	metrics.go  the sizes of the retained key spaces as Prometheus metrics
package store
