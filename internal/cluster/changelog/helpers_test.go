package changelog

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	testTopic = "app-changelog"
	testP     = 4
)

var seedFlag = flag.Uint64("seed", 0, "seed for the randomized tests (0: from the clock); each test logs the seed it used")

func testRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed))
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(string, ...any)        {}
func (quietLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf("pebble fatal: "+f, args...)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newCluster starts a three-broker kfake cluster with the compacted
// changelog topic of testP partitions.
func newCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	createTopic(t, c, testTopic)
	return c
}

func createTopic(t *testing.T, c *kfake.Cluster, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	compact := "compact"
	resp, err := kadm.NewClient(cl).CreateTopic(ctxT(t), testP, 3, map[string]*string{"cleanup.policy": &compact}, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("create topic %s: %v %v", topic, err, resp.Err)
	}
}

// openStore opens a store in dir on fs (nil: the disk), without the
// retention sweeper.
func openStore(t *testing.T, fs vfs.FS, dir string) *store.DB {
	t.Helper()
	db, err := store.Open(dir, store.Options{Partitions: testP, FS: fs, Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// producer is a transactional producer, as the cluster engine's session
// has: the changelog records go to the partitions they name.
func producer(t *testing.T, c *kfake.Cluster, txnID string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID(txnID),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// logged is one changelog record as committed: the model of the store.
type logged struct {
	offset int64
	key    []byte
	value  []byte // nil: a deletion
}

// model is what the committed changelog of one partition says, record by
// record.
type model struct{ recs []logged }

// at returns the store contents after the records before offset x.
func (m *model) at(x int64) map[string][]byte {
	out := map[string][]byte{}
	for _, r := range m.recs {
		if r.offset >= x {
			break
		}
		if r.value == nil {
			delete(out, string(r.key))
		} else {
			out[string(r.key)] = r.value
		}
	}
	return out
}

// cycle runs one transaction of partition l's owner: fill writes the
// overlay, its records are produced in a transaction that commits or
// aborts, and a committed overlay is applied. It returns the records.
func cycle(t *testing.T, ctx context.Context, prod *kgo.Client, l *Log, m *model, commit bool, fill func(b *store.Batch)) []*kgo.Record {
	t.Helper()
	return cycleHook(t, ctx, prod, l, m, commit, fill, nil)
}

// cycleHook is cycle with ended called after the transaction ended and
// before the overlay is applied (or closed, after an abort).
func cycleHook(t *testing.T, ctx context.Context, prod *kgo.Client, l *Log, m *model, commit bool, fill func(b *store.Batch), ended func()) []*kgo.Record {
	t.Helper()
	overlay := l.db.NewBatch()
	fill(overlay)
	recs, err := l.Records(overlay)
	if err != nil {
		t.Fatal(err)
	}
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	end := kgo.TryAbort
	if commit {
		end = kgo.TryCommit
	}
	if err := prod.EndTransaction(ctx, end); err != nil {
		t.Fatal(err)
	}
	if ended != nil {
		ended()
	}
	if !commit {
		overlay.Close()
		return recs
	}
	for _, r := range recs {
		m.recs = append(m.recs, logged{offset: r.Offset, key: r.Key, value: storeValue(r.Value)})
	}
	if err := l.Apply(overlay, recs); err != nil {
		t.Fatal(err)
	}
	return recs
}

func storeValue(v []byte) []byte {
	if v == nil {
		return nil
	}
	return v[1:]
}

// contents returns every key partition p's changelog wrote that the store
// holds, with its value, read key by key.
func contents(t *testing.T, db *store.DB, p int) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := db.ChangelogKeys(p, func(k []byte) error {
		v, ok, err := db.RawGet(k)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("key %x is in the index but not in the store", k)
		}
		out[string(k)] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkEqual compares the store's data of partition p with want, and
// checks that every key want lacks but the model ever wrote is absent.
func checkEqual(t *testing.T, db *store.DB, p int, want map[string][]byte, m *model, what string) {
	t.Helper()
	got := contents(t, db, p)
	var diffs []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("missing %x", k))
		} else if !bytes.Equal(g, v) {
			diffs = append(diffs, fmt.Sprintf("%x = %x, want %x", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("extra %x", k))
		}
	}
	for _, r := range m.recs {
		if _, ok := want[string(r.key)]; ok {
			continue
		}
		if _, ok, err := db.RawGet(r.key); err != nil || ok {
			diffs = append(diffs, fmt.Sprintf("deleted key %x is in the store (%v)", r.key, err))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		if len(diffs) > 10 {
			diffs = append(diffs[:10], fmt.Sprintf("… %d more", len(diffs)-10))
		}
		t.Fatalf("%s: store differs from the committed changelog:\n%s", what, fmt.Sprint(diffs))
	}
}

func restore(t *testing.T, ctx context.Context, c *kfake.Cluster, db *store.DB, p int, mod func(*Config)) (*Log, Result) {
	t.Helper()
	cfg := Config{DB: db, Brokers: c.ListenAddrs(), Topic: testTopic, Partition: int32(p), BatchRecords: 7}
	if mod != nil {
		mod(&cfg)
	}
	l, res, err := Restore(ctx, cfg)
	if err != nil {
		t.Fatalf("restore of partition %d: %v", p, err)
	}
	return l, res
}

// addrIn returns an address of partition p.
func addrIn(p, i int) address.Address {
	for n := 0; ; n++ {
		a := address.Address{Type: address.TypeName{Namespace: "ex", Name: "fn"}, ID: fmt.Sprintf("id-%d-%d", i, n)}
		if address.Partition(a.ID, testP) == p {
			return a
		}
	}
}

func entry(v string, version uint64) store.Entry {
	return store.Entry{Typename: "ex/t", Value: []byte(v), Version: version}
}

func env(a address.Address, text string) *protocol.Envelope {
	return &protocol.Envelope{Target: &protocol.Address{Namespace: a.Type.Namespace, Type: a.Type.Name, Id: a.ID},
		Argument: &protocol.TypedValue{Typename: "ex/s", HasValue: true, Value: []byte(text)}}
}
