package committer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)         {}
func (quietPebble) Errorf(string, ...any)        {}
func (quietPebble) Fatalf(f string, args ...any) { panic("pebble fatal: " + f) }

func openStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open("data", store.Options{Partitions: 2, FS: vfs.NewMem(), Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// inboxReq writes one inbox message and records what happened to it.
type inboxReq struct {
	key     store.InboxKey
	env     *protocol.Envelope
	durable chan struct{}
	failed  chan error
}

func newReq(seq uint64, id string) *inboxReq {
	return &inboxReq{
		key:     store.InboxKey{Partition: 0, Source: store.SourceIngress, Seq: seq},
		env:     &protocol.Envelope{Target: &protocol.Address{Namespace: "ns", Type: "t", Id: id}},
		durable: make(chan struct{}, 1), failed: make(chan error, 1),
	}
}

func (r *inboxReq) Encode(b *store.Batch) error { b.PutInbox(r.key, r.env); return nil }
func (r *inboxReq) Durable()                    { r.durable <- struct{}{} }
func (r *inboxReq) Fail(err error)              { r.failed <- err }

func inboxLen(t *testing.T, db *store.DB) int {
	n := 0
	if err := db.ScanInbox(0, func(store.InboxKey, *protocol.Envelope) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestGroupCommitIsDurableAndInOrder(t *testing.T) {
	db := openStore(t)
	var groups []int
	c := New(db, Options{Observe: func(_ time.Duration, reqs, _, _ int) { groups = append(groups, reqs) }})
	var reqs []*inboxReq
	for i := range 3 {
		r := newReq(uint64(i+1), "a")
		reqs = append(reqs, r)
		if err := c.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.CommitGroup(); err != nil || n != 3 {
		t.Fatalf("CommitGroup = %d, %v; want 3 requests in one group", n, err)
	}
	for _, r := range reqs {
		select {
		case <-r.durable:
		default:
			t.Fatalf("request %d was not told it is durable", r.key.Seq)
		}
	}
	if got := inboxLen(t, db); got != 3 {
		t.Fatalf("inbox holds %d messages, want 3", got)
	}
	if len(groups) != 1 || groups[0] != 3 {
		t.Fatalf("groups observed %v, want [3]", groups)
	}
}

func TestMaxGroupOpsCutsTheGroup(t *testing.T) {
	db := openStore(t)
	c := New(db, Options{MaxGroupOps: 2})
	for i := range 5 {
		if err := c.Submit(newReq(uint64(i+1), "a")); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := c.CommitGroup(); n != 2 {
		t.Fatalf("first group took %d requests, want 2", n)
	}
	if c.Pending() != 3 {
		t.Fatalf("%d requests wait, want 3", c.Pending())
	}
}

// A record protobuf refuses (a string that is not UTF-8) fails only its own
// request; the others of its group are written.
func TestUnencodableRequestFailsAlone(t *testing.T) {
	db := openStore(t)
	c := New(db, Options{})
	good1, bad, good2 := newReq(1, "a"), newReq(2, "\xff\xfe"), newReq(3, "b")
	for _, r := range []*inboxReq{good1, bad, good2} {
		if err := c.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CommitGroup(); err != nil {
		t.Fatalf("the group failed: %v", err)
	}
	select {
	case err := <-bad.failed:
		if !strings.Contains(err.Error(), "encode") {
			t.Fatalf("the bad request failed with %v, want an encoding error", err)
		}
	default:
		t.Fatal("the unencodable request was not failed")
	}
	for _, r := range []*inboxReq{good1, good2} {
		select {
		case <-r.durable:
		default:
			t.Fatalf("request %d was not made durable", r.key.Seq)
		}
	}
	if got := inboxLen(t, db); got != 2 {
		t.Fatalf("inbox holds %d messages, want 2", got)
	}
	if c.Err() != nil {
		t.Fatalf("the committer stopped: %v", c.Err())
	}
}

// A store error answers every waiting request — those of the failed group,
// those queued behind it and those submitted later — and stops the
// committer with the cause.
func TestStoreErrorAnswersEveryone(t *testing.T) {
	db := openStore(t)
	diskErr := errors.New("disk on fire")
	c := New(db, Options{Sync: func(*store.Batch) error { return diskErr }, MaxGroupOps: 1})
	reqs := []*inboxReq{newReq(1, "a"), newReq(2, "b"), newReq(3, "c")}
	for _, r := range reqs {
		if err := c.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error)
	go func() { done <- c.Run(context.Background()) }()
	if err := <-done; !errors.Is(err, diskErr) || !errors.Is(err, ErrStopped) {
		t.Fatalf("Run returned %v, want the store error wrapping ErrStopped", err)
	}
	for _, r := range reqs {
		select {
		case err := <-r.failed:
			if !errors.Is(err, diskErr) {
				t.Fatalf("request %d got %v, want the store error", r.key.Seq, err)
			}
		default:
			t.Fatalf("request %d was never answered", r.key.Seq)
		}
	}
	if err := c.Submit(newReq(4, "d")); !errors.Is(err, diskErr) {
		t.Fatalf("Submit after the failure = %v, want the store error", err)
	}
	if !errors.Is(c.Err(), diskErr) {
		t.Fatalf("Err() = %v", c.Err())
	}
}

func TestRunStopsWithContext(t *testing.T) {
	db := openStore(t)
	c := New(db, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	r := newReq(1, "a")
	if err := c.Submit(r); err != nil {
		t.Fatal(err)
	}
	<-r.durable
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after cancel, want nil", err)
	}
	if err := c.Submit(newReq(2, "b")); !errors.Is(err, ErrStopped) {
		t.Fatalf("Submit after stop = %v, want ErrStopped", err)
	}
}

// logReq records its callbacks in a shared log; answer makes it an
// Answerer, bad makes its Encode fail.
type logReq struct {
	name string
	log  *[]string
	bad  bool
}

func (r *logReq) Encode(b *store.Batch) error {
	if r.bad {
		return errors.New("cannot encode")
	}
	b.PutInbox(store.InboxKey{Source: store.SourceIngress, Seq: uint64(len(*r.log) + 1)}, &protocol.Envelope{})
	return nil
}
func (r *logReq) Durable()   { *r.log = append(*r.log, "durable "+r.name) }
func (r *logReq) Fail(error) { *r.log = append(*r.log, "fail "+r.name) }

type answerReq struct{ logReq }

func (r *answerReq) AfterGroup() { *r.log = append(*r.log, "answer "+r.name) }

// Callers waiting for a durable answer hear back after every request of
// the group was told it is durable, in submission order, and a request
// that failed to encode answers nobody: under load the answers an operator
// waits for are not queued behind the wakes of the function traffic.
func TestAnswerersHearAfterTheGroup(t *testing.T) {
	db := openStore(t)
	c := New(db, Options{})
	var log []string
	reqs := []Request{
		&answerReq{logReq{name: "a", log: &log}},
		&logReq{name: "b", log: &log},
		&answerReq{logReq{name: "c", log: &log, bad: true}},
		&answerReq{logReq{name: "d", log: &log}},
		&logReq{name: "e", log: &log},
	}
	for _, r := range reqs {
		if err := c.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.CommitGroup(); err != nil || n != len(reqs) {
		t.Fatalf("CommitGroup = %d, %v", n, err)
	}
	want := "fail c|durable a|durable b|durable d|durable e|answer a|answer d"
	if got := strings.Join(log, "|"); got != want {
		t.Fatalf("callbacks %s\nwant      %s", got, want)
	}
}

// laneReq is a request of a partition, urgent or not, that records the
// order it was made durable in.
type laneReq struct {
	name   string
	part   int
	urgent bool
	log    *[]string
}

func (r *laneReq) Encode(b *store.Batch) error { return nil }
func (r *laneReq) Durable()                    { *r.log = append(*r.log, r.name) }
func (r *laneReq) Fail(error)                  { *r.log = append(*r.log, r.name+"!") }
func (r *laneReq) Lane() (int, bool)           { return r.part, r.urgent }

// An urgent request goes in a group of its own partition's requests queued
// before it; everything else waits for the next group, in order.
func TestUrgentRequestCutsItsLane(t *testing.T) {
	db := openStore(t)
	var groups []int
	c := New(db, Options{Observe: func(_ time.Duration, reqs, _, _ int) { groups = append(groups, reqs) }})
	var log []string
	for _, r := range []*laneReq{
		{name: "p0-a", part: 0}, {name: "p1-a", part: 1}, {name: "p0-b", part: 0},
		{name: "p0-urgent", part: 0, urgent: true}, {name: "p0-c", part: 0}, {name: "p1-b", part: 1},
	} {
		r.log = &log
		if err := c.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CommitGroup(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(log); got != "[p0-a p0-b p0-urgent]" {
		t.Fatalf("first group made %s durable, want p0's requests up to the urgent one", got)
	}
	if _, err := c.CommitGroup(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(log); got != "[p0-a p0-b p0-urgent p1-a p0-c p1-b]" {
		t.Fatalf("after the second group %s, want the others in submission order", got)
	}
	if fmt.Sprint(groups) != "[3 3]" {
		t.Fatalf("groups %v, want [3 3]", groups)
	}
}

// Concurrent committed writes of several partitions share one group (and
// one sync): the urgent lane carries every urgent request queued, each with
// its partition's requests before it; the rest follow in order.
func TestUrgentRequestsShareTheirLane(t *testing.T) {
	db := openStore(t)
	var groups []int
	c := New(db, Options{Observe: func(_ time.Duration, reqs, _, _ int) { groups = append(groups, reqs) }})
	var log []string
	for _, r := range []*laneReq{
		{name: "p0-a", part: 0}, {name: "p1-a", part: 1}, {name: "p0-urgent", part: 0, urgent: true},
		{name: "p2-a", part: 2}, {name: "p1-urgent", part: 1, urgent: true}, {name: "p3-urgent", part: 3, urgent: true},
		{name: "p0-b", part: 0}, {name: "p2-b", part: 2},
	} {
		r.log = &log
		if err := c.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CommitGroup(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(log); got != "[p0-a p1-a p0-urgent p1-urgent p3-urgent]" {
		t.Fatalf("first group made %s durable, want every urgent request with its partition's before it", got)
	}
	if _, err := c.CommitGroup(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(log); got != "[p0-a p1-a p0-urgent p1-urgent p3-urgent p2-a p0-b p2-b]" {
		t.Fatalf("after the second group %s, want the others in submission order", got)
	}
	if fmt.Sprint(groups) != "[5 3]" {
		t.Fatalf("groups %v, want [5 3]", groups)
	}
}

// gatedFS holds every sync of the store's write-ahead log while its gate
// is shut, telling entered each time one begins: a disk whose sync takes
// as long as the test wants.
type gatedFS struct {
	vfs.FS
	shut    chan struct{} // closed: syncs pass
	entered chan string
}

func (fs *gatedFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return gatedFile{File: f, fs: fs, name: name}, nil
}

type gatedFile struct {
	vfs.File
	fs   *gatedFS
	name string
}

func (f gatedFile) gate() {
	select {
	case <-f.fs.shut:
	default:
		f.fs.entered <- f.name
		<-f.fs.shut
	}
}

func (f gatedFile) Sync() error     { f.gate(); return f.File.Sync() }
func (f gatedFile) SyncData() error { f.gate(); return f.File.SyncData() }

// gatedRun opens a store on a gatedFS, holds its log's syncs from then on,
// and runs a committer on it until the test ends. release lets the syncs
// through; the cleanup calls it before it stops Run, which waits for them.
func gatedRun(t *testing.T) (db *store.DB, c *Committer, fs *gatedFS, release func()) {
	t.Helper()
	open := make(chan struct{})
	close(open)
	fs = &gatedFS{FS: vfs.NewMem(), shut: open, entered: make(chan string, 16)} // Open syncs freely
	db, err := store.Open("data", store.Options{Partitions: 2, FS: fs, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	shut := make(chan struct{})
	fs.shut = shut
	release = sync.OnceFunc(func() { close(shut) })

	c = New(db, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(release)
	return db, c, fs, release
}

// orderedReq is an inboxReq that also notes, in order, when it is told
// it is durable.
type orderedReq struct {
	*inboxReq
	log chan<- uint64
}

func (r orderedReq) Durable() { r.log <- r.key.Seq; r.inboxReq.Durable() }

// While one group's sync runs, Run writes the next group — its writes are
// in the store before the first is durable — and the groups are still
// called back in order once each is durable. With the groups committed
// one after the other (pipelineDepth 1), the second is not written until
// the first's sync ends, and this test fails.
func TestRunWritesTheNextGroupWhileOneSyncs(t *testing.T) {
	db, c, fs, release := gatedRun(t)

	log := make(chan uint64, 4)
	first := orderedReq{newReq(1, "a"), log}
	if err := c.Submit(first); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fs.entered: // the first group's sync has begun, and waits
	case <-time.After(10 * time.Second):
		t.Fatal("the first group's sync never began")
	}
	second := orderedReq{newReq(2, "b"), log}
	if err := c.Submit(second); err != nil {
		t.Fatal(err)
	}
	waitWritten(t, db, 2) // the second group, while the first one's sync runs
	select {
	case seq := <-log:
		t.Fatalf("request %d was told it is durable before any sync ended", seq)
	default:
	}
	release()
	expectDurable(t, log, 1, 2)
}

// urgentOrdered is an orderedReq a caller waits on (committer.Urgent), in
// partition lane.
type urgentOrdered struct {
	orderedReq
	lane int
}

func (r urgentOrdered) Lane() (int, bool) { return r.lane, true }

// With the pipe full — one group syncing, one written behind it — an
// urgent request is written at once, to share the next sync, while a
// plain request submitted before it waits for a free slot; all of them
// are still called back in the order they were written.
func TestUrgentLaneSkipsTheFullPipe(t *testing.T) {
	db, c, fs, release := gatedRun(t)

	log := make(chan uint64, 8)
	submit := func(r Request) {
		t.Helper()
		if err := c.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	submit(orderedReq{newReq(1, "a"), log})
	<-fs.entered // group 1 syncs, and waits
	submit(orderedReq{newReq(2, "b"), log})
	waitWritten(t, db, 2) // group 2 written behind it: the pipe is full
	submit(orderedReq{newReq(3, "c"), log})
	submit(urgentOrdered{orderedReq{newReq(4, "d"), log}, 1})
	waitWritten(t, db, 3)
	db.ScanInbox(0, func(k store.InboxKey, _ *protocol.Envelope) error {
		if k.Seq == 3 {
			t.Fatal("the plain request was written while the pipe was full")
		}
		return nil
	})
	release()
	expectDurable(t, log, 1, 2, 4, 3)
}

// expectDurable checks that the requests of log are told they are
// durable in the order given.
func expectDurable(t *testing.T, log <-chan uint64, order ...uint64) {
	t.Helper()
	for _, want := range order {
		select {
		case got := <-log:
			if got != want {
				t.Fatalf("request %d was told it is durable when request %d was due", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d was never told it is durable", want)
		}
	}
}

// waitWritten waits until n messages are in the store's inbox.
func waitWritten(t *testing.T, db *store.DB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for inboxLen(t, db) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages written, want %d", inboxLen(t, db), n)
		}
		time.Sleep(time.Millisecond)
	}
}
