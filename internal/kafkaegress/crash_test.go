package kafkaegress

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A relay killed after its batch is in Kafka's log but before the commit,
// or after the commit but before the outbox removal, is replaced by a new
// one (same transactional id): the first is fenced and its open
// transaction aborted, the second learns from the marker topic what was
// committed. A read_committed consumer sees every record exactly once.
func TestExactlyOnceRelayCrash(t *testing.T) {
	for _, point := range []string{crashBeforeCommit, crashBeforeAck} {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/batch%d", point, n), func(t *testing.T) {
				c := newCluster(t)
				cfg := testConfig(c, ExactlyOnce)
				r1 := newRelay(t, cfg)
				hook, fired := crashAt(point, n)
				r1.crash = hook
				rt := openRuntime(t, vfs.NewMem(), r1.Route, nil)
				rt.ingest(t, 0, 60, 10)
				rt.start(r1)
				await(t, "the crash", fired)
				await(t, "the crashed relay to stop", r1.done) // dead, its client left open as a killed process's would be

				r2 := newRelay(t, cfg)
				rt.start(r2)
				waitDelivered(t, rt, c.ListenAddrs(), 60)
				if point == crashBeforeCommit {
					// The crashed batch reached the log and was aborted.
					if all := readTopic(t, c.ListenAddrs(), outTopic, false); len(all) <= 60 {
						t.Fatalf("read_uncommitted sees %d records: the crashed transaction's batch never reached the log, the test proves nothing", len(all))
					}
				}
			})
		}
	}
}

// The whole runtime is killed several times (the store keeps only what was
// synced; the relay stops where it is) while it delivers, and restarted on
// what the disk kept: every record reaches a read_committed consumer exactly
// once, nothing is lost.
func TestExactlyOnceRuntimeCrashes(t *testing.T) {
	const n = 150
	c := newCluster(t)
	cfg := testConfig(c, ExactlyOnce)
	rng := rand.New(rand.NewPCG(1, 2))
	fs := vfs.NewCrashableMem()

	r := newRelay(t, cfg)
	rt := openRuntime(t, fs, r.Route, nil)
	rt.ingest(t, 0, n, 13)
	for round := range 4 {
		point := []string{crashBeforeCommit, crashBeforeAck}[rng.IntN(2)]
		hook, fired := crashAt(point, 1+rng.IntN(3))
		var crashed *vfs.MemFS
		r.crash = func(p string) bool {
			if !hook(p) {
				return false
			}
			crashed = fs.CrashClone(vfs.CrashCloneCfg{}) // the power goes out here
			return true
		}
		rt.start(r)
		await(t, "the crash", fired)
		await(t, "the crashed relay to stop", r.done)
		rt.close()
		t.Logf("round %d: crashed at %s", round, point)

		fs = crashed
		r = newRelay(t, cfg)
		rt = openRuntime(t, fs, r.Route, nil)
	}
	// The last relay was made before its runtime, so its cleanup would run
	// after the runtime's: stop it first, as Close's contract asks.
	defer r.Close()
	rt.start(r)
	waitDelivered(t, rt, c.ListenAddrs(), n)
}
