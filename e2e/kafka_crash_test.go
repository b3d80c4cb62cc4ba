package e2e

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestKafkaCrashExactlyOnce is the headline test of Kafka in, Kafka out:
// kcat streams records for many counters into the input topic while the
// runtime process is killed with SIGKILL several times, at random moments
// (the seed is logged; STATEFUN_KAFKA_CRASH_SEED replays one). Afterwards
// every counter, read through the state API, equals the number of input
// records of its key, and the output topic, read read_committed by kcat,
// holds each effect "<key>=<count>" exactly once: no gap, no duplicate.
//
// STATEFUN_KAFKA_SOAK=1 runs a longer variant (more keys, records and
// kills) for make soak.
func TestKafkaCrashExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	t.Parallel()
	needKcat(t)
	keys, kills, rate := 200, 5, 400 // rate: records per second
	if os.Getenv("STATEFUN_KAFKA_SOAK") != "" {
		keys, kills, rate = 1000, 30, 800
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STATEFUN_KAFKA_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STATEFUN_KAFKA_CRASH_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with STATEFUN_KAFKA_CRASH_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	cluster := kafkaCluster(t)
	brokers := brokersOf(cluster)
	fn := kafkaCounterFn(t, "kc/out")
	rt := newRuntimeWith(t, func(in, out int) string {
		// No group.instance.id: the ingress is a static member by default,
		// so each restart takes the killed process's place in the group at
		// once (without it, every restart would wait out the 45 s session
		// timeout and this test would time out).
		return kafkaModule(fn, brokers, "exactly-once", in, out)
	})
	rt.start()

	// The stream: one kcat producer, fed at about rate records per second
	// by a goroutine, while the main goroutine kills and restarts.
	stream := newKcatStream(t, brokers, "in")
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		feed := rand.New(rand.NewPCG(seed, 1))
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- nil
				return
			case <-tick.C:
			}
			for range rate / 100 {
				if err := stream.send("k"+strconv.Itoa(feed.IntN(keys)), "x"); err != nil {
					done <- err
					return
				}
			}
		}
	}()
	start := time.Now()
	for i := range kills {
		wait := time.Duration(500+rng.IntN(2000)) * time.Millisecond
		time.Sleep(wait)
		rt.kill()
		t.Logf("kill %d at %v", i+1, time.Since(start).Round(time.Millisecond))
		rt.start()
	}
	time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("feeding kcat: %v", err)
	}
	stream.close(t)

	// The oracle: what the input topic holds, per key.
	want := map[string]int{}
	total := 0
	for _, r := range kcatRead(t, brokers, "in") {
		want[*r.Key]++
		total++
	}
	for k, n := range stream.count {
		if want[k] != n {
			t.Fatalf("the input topic has %d records of key %s, kcat was given %d", want[k], k, n)
		}
	}
	t.Logf("%d input records for %d keys, %d kills, streaming for %v", total, len(want), kills, time.Since(start).Round(time.Millisecond))

	rt.waitCounters(want, 60*time.Second)
	out := kcatReadUntil(t, brokers, "counts", total, 30*time.Second)
	checkEffects(t, out, want, nil)
}
