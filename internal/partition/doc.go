// Package partition is the deterministic state machine of one partition: the
// StateFun semantics of per-address mailboxes, batching, state, timers and
// the effects of function results — with no I/O, no clock and no goroutines.
//
// The contract follows etcd's raft RawNode:
//
//  1. The shell feeds inputs with Step(now, event): a message arrived, an
//     invocation result arrived, a commit became durable, time passed.
//  2. It takes the effects with Ready(): invocations to send now, the commit
//     to write, failures to log. Ready hands over ownership; calling it again
//     returns only what happened since.
//  3. It sends the invocations (their results come back as events), hands
//     the commit to the committer and, only when that commit is durable,
//     delivers the commit's messages for other partitions and releases its
//     egress records, then steps CommitDurable.
//
// Commits of one partition must become durable in the order Ready produced
// them. Within the partition, later work may build on effects that are not
// durable yet (an invocation may carry state written by a commit still in
// flight): after a crash the whole suffix re-runs from the last durable
// commit, so nothing outside the partition may observe those effects before
// they are durable. That is what the two outboxes are for: Ready.Invocations
// go out at once, Commit.Produced for other partitions only after the commit.
//
// Time is an input (unix milliseconds, like StateFun's processing time). The
// core reads committed state through the Reader it is given; store errors are
// returned from Step and make the partition inoperable (the shell stops it).
package partition
