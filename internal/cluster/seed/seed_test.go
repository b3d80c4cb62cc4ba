package seed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/store"
)

type quiet struct{}

func (quiet) Infof(string, ...any)         {}
func (quiet) Errorf(string, ...any)        {}
func (quiet) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// backup writes a cluster backup of 2 partitions, one node part: each
// partition holds two keys of its own, its read position in the messages
// topic, and one in the ingress topic "in" partition 0 (partition 0 at
// offset 7, partition 1 at offset 4).
func backup(t *testing.T) string {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{Partitions: 2, Logger: quiet{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for p, in := range []int64{7, 4} {
		b := db.NewBatch()
		b.PutReadPosition(p, store.ReadPosition{Topic: store.MessagesTopic, Partition: int32(p), Offset: 100})
		b.PutReadPosition(p, store.ReadPosition{Topic: "in", Partition: 0, Offset: in})
		var ops []store.Op
		if err := b.Ops(func(op store.Op) error { ops = append(ops, op); return nil }); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			ops = append(ops, store.Op{Key: []byte(fmt.Sprintf("\x01p%d-%d", p, i)), Value: []byte("v")})
		}
		if err := db.ApplyChangelog(p, ops, store.ChangelogPosition{Next: 10}); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	dir := filepath.Join(t.TempDir(), "cb")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := db.Backup(filepath.Join(dir, "node-a"), store.BackupOptions{Cluster: &store.ClusterPart{App: "shop", Node: "a", Backup: "x",
		Partitions: []store.PartitionBackup{{Partition: 0}, {Partition: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	cm, missing := store.NewClusterManifest("shop", "x", dir, 2, time.Now(), []*store.BackupManifest{m}, []string{"node-a"})
	if len(missing) > 0 {
		t.Fatal(missing)
	}
	if err := store.WriteClusterManifest(cm); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A seed creates the new application with the backup's P, writes each
// partition's keys into its changelog partition (read_committed), leaves
// out the positions in the old messages topic, commits the group's
// offset of each ingress topic partition at the lowest position any
// partition holds, and refuses to seed an application twice.
func TestSeed(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	dir := backup(t)
	adm0, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm0.Close()
	if _, err := kadm.NewClient(adm0).CreateTopic(context.Background(), 1, 1, nil, "in"); err != nil {
		t.Fatal(err)
	}
	cfg := &clusterconfig.Config{Brokers: c.ListenAddrs(), AppID: "restored", NodeID: NodeID, Advertise: "http://127.0.0.1:8070"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Seed(ctx, cfg, dir, quiet{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.App.Partitions != 2 || res.App.CreatedBy != NodeID || res.Records[0] != 3 || res.Records[1] != 3 {
		t.Errorf("seeded %+v, records %v: want P 2 and 3 records a partition (two keys, one ingress position)", res.App, res.Records)
	}
	if got := res.IngressOffsets["in"][0]; got != 4 {
		t.Errorf("the offset of in/0: %d, want 4 (the lowest position held)", got)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"restored-changelog": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[int32][]string{}
	for n := 0; n < 6; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of 6 changelog records: %v", n, got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], fmt.Sprintf("%q=%q", r.Key, r.Value))
			n++
		})
	}
	for p := range int32(2) {
		joined := strings.Join(got[p], " ")
		if !strings.Contains(joined, fmt.Sprintf(`"\x01p%d-0"="\x01v"`, p)) || !strings.Contains(joined, fmt.Sprintf(`"\x01p%d-1"="\x01v"`, p)) || strings.Contains(joined, `p1`) != (p == 1) {
			t.Errorf("changelog partition %d: %s", p, joined)
		}
	}
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, "restored")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup("in", 0); !ok || o.At != 4 {
		t.Errorf("group restored's offset of in/0: %+v %v", o, ok)
	}

	if _, err := Seed(ctx, cfg, dir, quiet{}, nil); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("a second seed: %v, want ErrNotEmpty", err)
	}
}
