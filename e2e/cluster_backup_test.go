package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/statefun-go/statefun/internal/store"
)

// Backups in cluster mode (docs/how-to/backup.md, "Cluster mode"): the
// real binary, two nodes on devkafka, traffic through both.

// cbBackup asks node n for a cluster backup into dir and returns its
// manifest; it fails the test unless the answer is a 201.
func cbBackup(t *testing.T, n *clusterNode, dir string) store.ClusterBackupManifest {
	t.Helper()
	r := n.api(t, "POST", "/backups", `{"to":"`+dir+`"}`, "Content-Type", "application/json")
	if r.status != http.StatusCreated {
		t.Fatalf("POST /backups on %s: %d %s", n.id, r.status, r.body)
	}
	var m store.ClusterBackupManifest
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("the cluster backup's manifest: %v\n%s", err, r.body)
	}
	return m
}

// cbChangelogAt folds partition p of topic, read read_committed as a
// restore reads it, up to offset next (exclusive): each key's last value,
// keys whose last record is a tombstone left out. It is what the cluster
// held of the partition at that position.
func cbChangelogAt(t *testing.T, brokers, topic string, p int32, next int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	if next <= 0 {
		return out
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(0)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s partition %d up to %d: %v", topic, p, next, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= next {
				done = true
				return
			}
			if r.Offset == next-1 {
				done = true
			}
			if r.Attrs.IsControl() {
				return
			}
			switch {
			case r.Value == nil:
				delete(out, string(r.Key))
			case len(r.Value) > 0 && r.Value[0] == 0x01:
				out[string(r.Key)] = string(r.Value[1:])
			default:
				t.Fatalf("%s partition %d offset %d: not a changelog record", topic, p, r.Offset)
			}
		})
	}
	return out
}

// cbRead reads kc/counter/<id>'s count and how many messages its inbox
// holds from runtime r (a read-only one): -1 for no count.
func cbRead(t *testing.T, admin, id string) (count int64, inbox int) {
	t.Helper()
	status, body := bkDo(t, "GET", "http://"+admin+"/state/kc/counter/"+id+"/count", "", "")
	switch status {
	case http.StatusOK:
		v, err := strconv.ParseInt(strings.TrimSpace(body), 10, 64)
		if err != nil {
			t.Fatalf("the count of %s: %q", id, body)
		}
		count = v
	case http.StatusNotFound:
		count = -1
	default:
		t.Fatalf("GET the count of %s: %d %s", id, status, body)
	}
	status, body = bkDo(t, "GET", "http://"+admin+"/inbox/kc/counter/"+id, "", "")
	if status != http.StatusOK {
		t.Fatalf("GET the inbox of %s: %d %s", id, status, body)
	}
	return count, strings.Count(body, `"key"`)
}

// A cluster backup taken under load holds every partition, each exactly
// as the changelog held it at the position the manifest names (compared
// key by key with the changelog read from Kafka); `statefun backup verify`
// passes it and names the partitions of a missing node part; a read-only
// runtime over it serves every counter and refuses every write without
// changing a byte of it; and a new application seeded from it (`statefun
// backup seed`) restores every partition on two new nodes, which then run
// what the backup's inboxes held: each counter ends at its count in the
// backup plus its inbox there.
func TestClusterBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "cbk", fn, "node-a", "node-b")
	launchAll(t, nodes...)
	tr := startTraffic(t, "kc/counter", 40, nodes...)
	tr.waitAcked(2*time.Second, 30*time.Second)

	dir := filepath.Join(t.TempDir(), "cluster-backup")
	m := cbBackup(t, nodes[1], dir)
	tr.waitAcked(time.Second, 30*time.Second) // the traffic goes on
	tr.halt()

	// Every partition once, each with the node that wrote it; both nodes
	// wrote a part.
	var ps []int
	writers := map[string]bool{}
	for _, pb := range m.Parts {
		ps = append(ps, pb.Partition)
		writers[pb.Node] = true
		if pb.ChangelogNext <= 0 {
			t.Errorf("partition %d at changelog offset %d: the traffic wrote every partition", pb.Partition, pb.ChangelogNext)
		}
	}
	if !slices.Equal(ps, []int{0, 1, 2, 3, 4, 5, 6, 7}) || len(writers) != 2 || len(m.Nodes) != 2 || m.App != "cbk" {
		t.Fatalf("the manifest lists partitions %v written by %v (%d node parts) of %q", ps, writers, len(m.Nodes), m.App)
	}
	// A second backup into the same directory is refused.
	if r := nodes[0].api(t, "POST", "/backups", `{"to":"`+dir+`"}`, "Content-Type", "application/json"); r.status != http.StatusBadRequest {
		t.Errorf("a second backup into %s: %d %s", dir, r.status, r.body)
	}

	// Entry by entry: each partition of the backup, as the seed reads it
	// and as read-only mode assembles it, is its changelog at the
	// backup's position. The changelog's partitions are gathered into a
	// store of their own, for the exports compared below.
	assembled := filepath.Join(t.TempDir(), "assembled")
	if _, err := store.AssembleClusterBackup(dir, assembled, nil); err != nil {
		t.Fatal(err)
	}
	adb, err := store.Open(assembled, store.Options{ReadOnly: true, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	fromLog := filepath.Join(t.TempDir(), "from-changelog")
	ldb, err := store.Open(fromLog, store.Options{Partitions: 8, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	keys := 0
	for _, pb := range m.Parts {
		want := cbChangelogAt(t, dk.brokers, "cbk-changelog", int32(pb.Partition), pb.ChangelogNext)
		seeded, inStore := map[string]string{}, map[string]string{}
		err := store.ClusterBackupRecords(dir, &m, pb.Partition, nil, func(k, v []byte) error {
			seeded[string(k)] = string(v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = adb.ChangelogKeys(pb.Partition, func(k []byte) error {
			v, _, err := adb.RawGet(k)
			inStore[string(k)] = string(v)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for what, got := range map[string]map[string]string{"the backup's records": seeded, "the assembled store": inStore} {
			if diffs := cbDiff(want, got); len(diffs) > 0 || len(want) == 0 {
				t.Errorf("partition %d (node %s, changelog up to %d), %s: %d keys in the changelog, %d here; %d differences: %s",
					pb.Partition, pb.Node, pb.ChangelogNext, what, len(want), len(got), len(diffs), strings.Join(first(diffs, 10), ", "))
			}
		}
		keys += len(want)
		var ops []store.Op
		for k, v := range want {
			ops = append(ops, store.Op{Key: []byte(k), Value: []byte(v)})
		}
		if err := ldb.ApplyChangelog(pb.Partition, ops, store.ChangelogPosition{Next: pb.ChangelogNext}); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(adb.Close(), ldb.Close()); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keys in 8 partitions compared with the changelog", keys)

	if out, code := bkCLI(t, "backup", "verify", dir); code != 0 || !strings.Contains(out, "every one present") {
		t.Fatalf("statefun backup verify: exit %d\n%s", code, out)
	}
	// Without one node's part (not copied from its host), verify names
	// the part, its node and its partitions.
	partial := filepath.Join(t.TempDir(), "partial")
	bkCopy(t, dir, partial)
	var gone store.ClusterBackupNode
	for _, n := range m.Nodes {
		if n.Node == "node-a" {
			gone = n
		}
	}
	if err := os.RemoveAll(filepath.Join(partial, gone.Dir)); err != nil {
		t.Fatal(err)
	}
	out, code := bkCLI(t, "backup", "verify", partial)
	if code != 1 || !strings.Contains(out, "node-a") || !strings.Contains(out, fmt.Sprint(gone.Partitions)) || !strings.Contains(out, "is missing") {
		t.Errorf("statefun backup verify without node-a's part (partitions %v): exit %d\n%s", gone.Partitions, code, out)
	}

	// A read-only runtime over the backup: every counter and inbox, and
	// every write refused.
	files := bkFiles(t, dir)
	ro := newRuntimeWith(t, func(in, _ int) string { return clusterModule(fn, dk.brokers, in) })
	saStart(ro, "http", http.DefaultClient, "--read-only", "--data-dir", dir)
	counts, inboxes := map[string]int{}, map[string]int{}
	pending := 0
	for i := range 40 {
		id := "k" + strconv.Itoa(i)
		c, in := cbRead(t, ro.admin, id)
		counts[id], inboxes[id] = int(c), in
		pending += in
	}
	api := "http://" + ro.admin
	for _, w := range []struct{ method, url, ct, body string }{
		{"PUT", api + "/state/kc/counter/k1/count", "text/plain", "42"},
		{"DELETE", api + "/state/kc/counter/k1", "", ""},
		{"POST", api + "/pause/kc/counter/k1", "", ""},
		{"POST", api + "/backups", "application/json", `{"to":"/tmp/x"}`},
		{"PUT", ro.ingress + "/kc/counter/k1", "application/vnd.kc/text", "x"},
	} {
		status, body := bkDo(t, w.method, w.url, w.ct, w.body)
		if status != http.StatusConflict || !strings.Contains(body, "read-only mode") {
			t.Errorf("%s %s in read-only mode: %d %s, want 409 naming read-only mode", w.method, w.url, status, body)
		}
	}
	// An export of the read-only runtime is an export of the changelog at
	// the backup's positions, served the same way.
	exported := cbExport(t, ro.admin)
	if err := ro.stop(); err != nil {
		t.Fatal(err)
	}
	logRT := newRuntimeWith(t, func(in, _ int) string { return clusterModule(fn, dk.brokers, in) })
	saStart(logRT, "http", http.DefaultClient, "--read-only", "--data-dir", fromLog)
	if want := cbExport(t, logRT.admin); !slices.Equal(exported, want) || len(want) < 10 {
		t.Errorf("the export of the backup (%d entries) is not the export of the changelog at its positions (%d entries)", len(exported), len(want))
	}
	if after := bkFiles(t, dir); !mapsEqual(files, after) {
		t.Errorf("read-only mode changed the backup")
	}
	t.Logf("the backup holds %d messages in inboxes", pending)

	// Restore: a new application seeded from the backup, on two new
	// nodes with empty data directories.
	out, code = bkCLI(t, "backup", "seed", dir, "--cluster-brokers", dk.brokers, "--cluster-app-id", "cbk2")
	if code != 0 {
		t.Fatalf("statefun backup seed: exit %d\n%s", code, out)
	}
	if out, code := bkCLI(t, "backup", "seed", dir, "--cluster-brokers", dk.brokers, "--cluster-app-id", "cbk2"); code != 1 || !strings.Contains(out, "not empty") {
		t.Errorf("a second seed of cbk2: exit %d\n%s", code, out)
	}
	restored := newClusterNodes(t, dk, "cbk2", fn, "node-c", "node-d")
	launchAll(t, restored...)
	want := map[string]int{}
	for id, c := range counts {
		want[id] = c
		if inboxes[id] > 0 {
			want[id] = max(c, 0) + inboxes[id]
		}
	}
	waitCounts(t, restored, want, 60*time.Second)
}

// cbDiff lists the keys where got differs from want.
func cbDiff(want, got map[string]string) []string {
	var diffs []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%x missing", k))
		} else if g != v {
			diffs = append(diffs, fmt.Sprintf("%x differs", k))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%x not in the changelog", k))
		}
	}
	return diffs
}

// cbExport is `statefun state export` of the runtime at admin, its lines
// sorted.
func cbExport(t *testing.T, admin string) []string {
	t.Helper()
	cmd := exec.Command(binary, "state", "export", "--server", "http://"+admin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("statefun state export: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	slices.Sort(lines)
	return lines
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// cbTxnBuckets scrapes the cumulative buckets of
// statefun_cluster_txn_seconds from nodes, summed: upper bound → count.
func cbTxnBuckets(t *testing.T, nodes []*clusterNode) map[float64]float64 {
	t.Helper()
	out := map[float64]float64{}
	for _, n := range nodes {
		resp, err := http.Get("http://" + n.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "statefun_cluster_txn_seconds_bucket{") {
				continue
			}
			i := strings.Index(line, `le="`)
			j := strings.Index(line[i+4:], `"`)
			le, err := strconv.ParseFloat(line[i+4:i+4+j], 64)
			if err != nil {
				le = math.Inf(1)
			}
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			out[le] += v
		}
	}
	return out
}

// cbQuantile is the upper bound of the bucket holding quantile q of the
// transactions counted between two scrapes, and their count.
func cbQuantile(before, after map[float64]float64, q float64) (float64, float64) {
	les := slices.Sorted(maps.Keys(after))
	total := after[math.Inf(1)] - before[math.Inf(1)]
	for _, le := range les {
		if after[le]-before[le] >= q*total {
			return le, total
		}
	}
	return math.Inf(1), total
}

// TestClusterBackupImpact measures what cluster backups cost (the figures
// in docs/benchmarks.md, "Backups in cluster mode"): two nodes, 8
// partitions, CB_KEYS state entries imported, traffic through both
// nodes; the transactions' latency over CB_WINDOW without backups, then
// over CB_WINDOW of cluster backups taken back to back, and each
// backup's checkpoint and whole time per node. Run it with
// STATEFUN_BENCH_CLUSTER_BACKUP=1.
func TestClusterBackupImpact(t *testing.T) {
	if os.Getenv("STATEFUN_BENCH_CLUSTER_BACKUP") == "" {
		t.Skip("a measurement: set STATEFUN_BENCH_CLUSTER_BACKUP=1")
	}
	keys, window := 100000, 20*time.Second
	if v, err := strconv.Atoi(os.Getenv("CB_KEYS")); err == nil {
		keys = v
	}
	if v, err := time.ParseDuration(os.Getenv("CB_WINDOW")); err == nil {
		window = v
	}
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "cbb", fn, "node-a", "node-b")
	launchAll(t, nodes...)

	// The state: keys entries of 100 bytes, written through both nodes
	// (import is embedded mode's).
	value := strings.Repeat("v", 100)
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += 16 {
				req, _ := http.NewRequest("PUT", "http://"+nodes[i%2].admin+"/state/kc/bulk/b"+strconv.Itoa(i)+"/v?ack=accepted", strings.NewReader(value))
				req.Header.Set("Content-Type", "text/plain")
				req.Header.Set("Statefun-Type", "io.statefun.types/string")
				resp, err := http.DefaultClient.Do(req)
				if err != nil || resp.StatusCode >= 300 {
					failed.Add(1)
				}
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d PUTs failed", n, keys)
	}
	t.Logf("wrote %d entries in %v", keys, time.Since(start).Round(time.Millisecond))

	tr := startTraffic(t, "kc/counter", 200, nodes...)
	tr.waitAcked(3*time.Second, 30*time.Second)

	before := cbTxnBuckets(t, nodes)
	acked := tr.ackedTotal()
	time.Sleep(window)
	quiet := cbTxnBuckets(t, nodes)
	quietAcked := tr.ackedTotal() - acked
	var checkpoints, totals, requests []time.Duration
	var parts []int
	var bytes int64
	root := t.TempDir()
	deadline := time.Now().Add(window)
	for i := 0; time.Now().Before(deadline); i++ {
		s := time.Now()
		m := cbBackup(t, nodes[i%2], filepath.Join(root, strconv.Itoa(i)))
		requests = append(requests, time.Since(s))
		for _, n := range m.Nodes {
			checkpoints = append(checkpoints, time.Duration(n.CheckpointMillis)*time.Millisecond)
			totals = append(totals, time.Duration(n.TotalMillis)*time.Millisecond)
			parts = append(parts, len(n.Partitions))
			bytes = max(bytes, n.Bytes)
		}
		if i == 0 {
			if out, code := bkCLI(t, "backup", "verify", filepath.Join(root, "0")); code != 0 {
				t.Fatalf("verify: %s", out)
			}
		}
	}
	busy := cbTxnBuckets(t, nodes)
	busyAcked := tr.ackedTotal() - acked - quietAcked
	tr.halt()

	med := func(ds []time.Duration) (time.Duration, time.Duration) {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2], s[len(s)-1]
	}
	q50a, na := cbQuantile(before, quiet, 0.5)
	q99a, _ := cbQuantile(before, quiet, 0.99)
	q50b, nb := cbQuantile(quiet, busy, 0.5)
	q99b, _ := cbQuantile(quiet, busy, 0.99)
	cm, cx := med(checkpoints)
	tm, tx := med(totals)
	rm, rx := med(requests)
	t.Logf("%d keys; node parts of up to %.1f MiB, %v partitions each", keys, float64(bytes)/(1<<20), slices.Compact(slices.Sorted(slices.Values(parts))))
	t.Logf("%d cluster backups back to back in %v: request median %v (max %v); per node part: checkpoint median %v (max %v), whole part median %v (max %v)",
		len(requests), window, rm, rx, cm, cx, tm, tx)
	// What the backup's restores cost, the nodes stopped: read-only mode
	// assembling it, the seed of a new application.
	for _, n := range nodes {
		n.kill()
	}
	first := filepath.Join(root, "0")
	ro := newRuntimeWith(t, func(in, _ int) string { return clusterModule(fn, dk.brokers, in) })
	s := time.Now()
	ro.cmd = exec.Command(binary, ro.runArgs("--read-only", "--data-dir", first)...)
	ro.cmd.Env = append(os.Environ(), "STATEFUN_LISTEN_HOST=127.0.0.1")
	ro.cmd.Stdout, ro.cmd.Stderr = ro, ro
	if err := ro.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Minute, "read-only mode over the backup ready", func() bool {
		status, _, err := ro.readyz()
		return err == nil && status == http.StatusOK
	})
	t.Logf("read-only mode over the first backup: ready in %v (assembling included)", time.Since(s).Round(time.Millisecond))
	_ = ro.cmd.Process.Kill()
	_ = ro.cmd.Wait()
	s = time.Now()
	if out, code := bkCLI(t, "backup", "seed", first, "--cluster-brokers", dk.brokers, "--cluster-app-id", "cbb2"); code != 0 {
		t.Fatalf("seed: %s", out)
	} else {
		t.Logf("statefun backup seed: %v\n%s", time.Since(s).Round(time.Millisecond), out)
	}
	t.Logf("without backups: %.0f transactions, %.0f/s, %d messages acknowledged; transaction latency p50 ≤ %gs, p99 ≤ %gs", na, na/window.Seconds(), quietAcked, q50a, q99a)
	t.Logf("during backups:  %.0f transactions, %.0f/s, %d messages acknowledged; transaction latency p50 ≤ %gs, p99 ≤ %gs", nb, nb/window.Seconds(), busyAcked, q50b, q99b)
}
