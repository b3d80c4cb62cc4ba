package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/partition"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// logSyncFS calls before ahead of every sync of the store's write-ahead
// log: a disk whose syncs take as long as the test wants.
type logSyncFS struct {
	vfs.FS
	before func()
}

func (fs logSyncFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return logSyncFile{File: f, before: fs.before}, nil
}

type logSyncFile struct {
	vfs.File
	before func()
}

func (f logSyncFile) Sync() error     { f.before(); return f.File.Sync() }
func (f logSyncFile) SyncData() error { f.before(); return f.File.SyncData() }

// Partitions bounded at two messages, fed batches by several sources at
// once on a disk whose syncs are slow, page nearly every message through
// the store while the deliveries of the groups being synced race the
// runners' pages for the same messages; a fifth of the messages make the
// function send one on, to its own partition (which its core hands over
// through the store too) or, with four partitions, mostly to another.
// Beside them single messages come through Ingest and an operator writes
// other addresses, acknowledged accepted and committed in turn. Every
// message is counted exactly once, every write holds and its receipt says
// committed, the engine never fails, and once it is done nothing is
// counted as waiting in the store and the inboxes are empty.
//
// With a delivery deciding outside the paging lock (and a page claiming
// messages outside it) it failed 20 runs of 20 on one partition: the
// engine stopped ("consumed message N of source N, which is not in its
// inbox": a page and a delivery both took a message), or the waiting
// gauge went below zero, or the runner deadlocked (the second read of a
// page, under the lock, took it again for a message the partition handed
// itself).
func TestPagingRacesDeliveries(t *testing.T) {
	for _, parts := range []int{1, 4} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) { pagingRacesDeliveries(t, parts) })
	}
}

func pagingRacesDeliveries(t *testing.T, parts int) {
	const sources, batches, per = 4, 40, 5
	// Slow syncs: the committer has a group written (readable) while the
	// one before it still syncs, so the pages read messages whose
	// deliveries have not run yet.
	slow := func() { time.Sleep(time.Millisecond) }
	db := openStore(t, logSyncFS{FS: vfs.NewMem(), before: slow}, parts)
	e := newEngine(t, db, &counter{}, func(o *Options) { o.MaxBacklog = 2 })
	e.Start()
	ids := []string{"a", "b", "c", "d"}
	// try retries what the engine refuses as busy; run runs a goroutine
	// of the load, keeping its error.
	try := func(do func() error) error {
		for {
			err := do()
			switch {
			case errors.Is(err, ErrBusy) && e.Err() == nil:
				time.Sleep(time.Millisecond)
			case err != nil:
				return fmt.Errorf("%w (the engine: %v)", err, e.Err())
			default:
				return nil
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, sources+3)
	run := func(load func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := load(); err != nil {
				errs <- err
			}
		}()
	}
	for s := range sources {
		run(func() error {
			for b := range batches {
				sb := SourceBatch{Position: store.SourcePosition{Ingress: "test/kafka", Topic: "in", Partition: int32(s), Next: int64(b+1) * per}}
				for i := range per {
					text := strconv.Itoa(i)
					if i == 0 {
						text = "fwd:e" // the function sends one on to e
					}
					sb.Messages = append(sb.Messages, msg(ids[(s+i)%len(ids)], text))
				}
				if err := try(func() error { return e.IngestFrom(context.Background(), sb) }); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// Beside the sources: single messages through Ingest, and operator
	// writes to other addresses of the type, accepted and committed in
	// turn, once the type's states are known.
	const singles, mutations = 24, 40 // singles: per id, from two goroutines
	for g := range 2 {
		run(func() error {
			for i := range singles / 2 * len(ids) {
				if err := try(func() error { return e.Ingest(context.Background(), msg(ids[(g+i)%len(ids)], "single")) }); err != nil {
					return fmt.Errorf("ingest: %w", err)
				}
			}
			return nil
		})
	}
	run(func() error {
		for len(e.SpecsOf(counterType)) == 0 && e.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		for i := range mutations {
			ack := AckAccepted
			if i%2 == 1 {
				ack = AckCommitted
			}
			m := partition.Mutation{ID: fmt.Sprintf("m%d", i), Addr: addr(fmt.Sprintf("m%d", i%4)), State: "n", Op: partition.OpPut,
				Typename: countTypename, Value: []byte(strconv.Itoa(i)), Ack: ack}
			if err := try(func() error { _, err := e.Mutate(context.Background(), m); return err }); err != nil {
				return fmt.Errorf("mutate %s: %w", m.ID, err)
			}
		}
		return nil
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range mutations {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rc, ok, err := e.WaitReceipt(ctx, fmt.Sprintf("m%d", i))
		cancel()
		if err != nil || !ok || rc.GetStatus() != "committed" {
			t.Fatalf("receipt of m%d: %v (%v, %v), want committed", i, rc, ok, err)
		}
	}
	// The store's counts: reads through the engine count against the
	// partition's bound of two.
	stored := func(id string) string {
		v, _, err := db.GetState(addr(id), "n")
		if err != nil {
			t.Fatal(err)
		}
		return string(v.Value)
	}
	want := strconv.Itoa(sources*batches*per/len(ids) + singles)
	waitFor(t, "every message counted", func() bool {
		if err := e.Err(); err != nil {
			t.Fatalf("the engine failed: %v", err)
		}
		for _, id := range ids {
			if stored(id) != want {
				return false
			}
		}
		return stored("e") == strconv.Itoa(sources*batches)
	})
	var got []string
	for _, id := range append(ids, "e", "m0", "m1", "m2", "m3") {
		got = append(got, id+"="+stored(id))
	}
	if fmt.Sprint(got) != fmt.Sprint([]string{"a=224", "b=224", "c=224", "d=224", "e=160", "m0=36", "m1=37", "m2=38", "m3=39"}) {
		t.Fatalf("counts %v", got)
	}
	for p := range parts {
		waitFor(t, "paging to end", func() bool { return !e.part(p).pg.on.Load() })
		if n := e.part(p).pg.waiting.Load(); n != 0 {
			t.Fatalf("partition %d: %d messages counted as waiting in the store, want 0", p, n)
		}
		var inbox int
		if err := db.ScanInboxFrom(p, 0, func(store.InboxKey, *protocol.Envelope) error { inbox++; return nil }); err != nil {
			t.Fatal(err)
		}
		if inbox != 0 {
			t.Fatalf("partition %d: %d messages left in the inbox", p, inbox)
		}
	}
}
