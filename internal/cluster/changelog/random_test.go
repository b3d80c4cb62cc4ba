package changelog

import (
	"fmt"
	"testing"

	"github.com/statefun-go/statefun/internal/store"
)

// TestRandomCommitsAndAborts: for a few seeds, two partitions' owners run
// random transactions of random store operations, committing or aborting
// each; compaction runs at random moments. A store that never owned them
// restores both, in random batch sizes, and must equal the model of the
// committed operations of each — and each owner's store must too.
func TestRandomCommitsAndAborts(t *testing.T) {
	rng := testRand(t)
	rounds := 4
	if testing.Short() {
		rounds = 1
	}
	for round := range rounds {
		ctx := ctxT(t)
		c := newCluster(t)
		owner := openStore(t, nil, t.TempDir())
		parts := []int{0, 2}
		logs := map[int]*Log{}
		models := map[int]*model{}
		for _, p := range parts {
			logs[p], _ = restore(t, ctx, c, owner, p, nil)
			models[p] = &model{}
		}
		prod := producer(t, c, fmt.Sprint("owner-", round))
		for i := range 30 {
			p := parts[rng.IntN(len(parts))]
			commit := rng.IntN(4) > 0
			tag := fmt.Sprint(map[bool]string{true: "committed", false: "aborted"}[commit], "-", i)
			cycle(t, ctx, prod, logs[p], models[p], commit, func(o *store.Batch) { randomOps(rng, o, p, tag) })
			if rng.IntN(8) == 0 {
				c.Compact()
			}
		}
		for _, p := range parts {
			checkEqual(t, owner, p, models[p].at(1<<62), models[p], fmt.Sprintf("round %d, the owner's partition %d", round, p))
		}
		_ = owner.Close()

		fresh := openStore(t, nil, t.TempDir())
		for _, p := range parts {
			restore(t, ctx, c, fresh, p, func(cfg *Config) { cfg.BatchRecords = 1 + rng.IntN(10) })
			checkEqual(t, fresh, p, models[p].at(1<<62), models[p], fmt.Sprintf("round %d, partition %d restored", round, p))
		}
		_ = fresh.Close()
	}
}
