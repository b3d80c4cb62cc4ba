package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// cbNode is a cluster node's store: partitions applied from their
// changelogs, each key "k<p>/<i>" of state space with value v.
func cbNode(t *testing.T, parts map[int]string) *DB {
	t.Helper()
	db, _ := openTest(t, 4)
	for p, v := range parts {
		var ops []Op
		for i := range 3 {
			ops = append(ops, Op{Key: []byte(fmt.Sprintf("%ck%d/%d", spaceState, p, i)), Value: []byte(v)})
		}
		if err := db.ApplyChangelog(p, ops, ChangelogPosition{Next: int64(10 + p)}); err != nil {
			t.Fatal(err)
		}
		// One key deleted again: not in the partition any more.
		if err := db.ApplyChangelog(p, []Op{{Key: ops[2].Key, Delete: true}}, ChangelogPosition{Next: int64(20 + p)}); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// A cluster backup made of two node parts: each part names the partitions
// its node served, the top-level manifest takes each partition from the
// part that served it (not from a node's stale copy), verify passes it
// and names a missing part, and the assembled store holds exactly each
// partition's keys at its position.
func TestClusterBackup(t *testing.T) {
	// Node a serves 0 and 1 and holds a stale copy of 2; node b serves 2
	// and 3.
	a := cbNode(t, map[int]string{0: "a", 1: "a", 2: "stale"})
	b := cbNode(t, map[int]string{2: "b", 3: "b"})
	to := filepath.Join(t.TempDir(), "cb")
	if err := os.Mkdir(to, 0o755); err != nil {
		t.Fatal(err)
	}
	part := func(db *DB, node string, ps ...int) *BackupManifest {
		t.Helper()
		var pbs []PartitionBackup
		for _, p := range ps {
			pbs = append(pbs, PartitionBackup{Partition: p})
		}
		m, err := db.Backup(filepath.Join(to, "node-"+node), BackupOptions{Cluster: &ClusterPart{App: "app", Node: node, Backup: "x", Partitions: pbs}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ma, mb := part(a, "a", 0, 1), part(b, "b", 2, 3)
	if got := ma.Cluster.Partitions; len(got) != 2 || got[1] != (PartitionBackup{Partition: 1, ChangelogNext: 21, ChangelogTopicID: strings.Repeat("0", 32), Keys: 2}) {
		t.Errorf("node a's part: %+v", got)
	}
	if _, missing := NewClusterManifest("app", "x", to, 4, time.Now(), []*BackupManifest{ma}, []string{"node-a"}); !slices.Equal(missing, []int{2, 3}) {
		t.Errorf("a manifest of node a's part alone misses %v, want [2 3]", missing)
	}
	m, missing := NewClusterManifest("app", "x", to, 4, time.Now(), []*BackupManifest{ma, mb}, []string{"node-a", "node-b"})
	if len(missing) > 0 {
		t.Fatalf("missing %v", missing)
	}
	if m.Parts[2].Node != "b" || m.Parts[2].ChangelogNext != 22 {
		t.Errorf("partition 2 in the manifest: %+v, want node b's at 22", m.Parts[2])
	}
	if err := WriteClusterManifest(m); err != nil {
		t.Fatal(err)
	}
	if err := WriteClusterManifest(m); !errors.Is(err, ErrBackupDest) {
		t.Errorf("a second manifest in %s: %v", to, err)
	}
	if _, err := VerifyClusterBackup(to, quietLogger{}); err != nil {
		t.Fatal(err)
	}

	got := map[int]map[string]string{}
	for p := range 4 {
		got[p] = map[string]string{}
		err := ClusterBackupRecords(to, m, p, quietLogger{}, func(k, v []byte) error {
			got[p][string(k)] = string(v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[int]string{0: "a", 1: "a", 2: "b", 3: "b"} {
		if len(got[p]) != 2 || got[p][fmt.Sprintf("%ck%d/0", spaceState, p)] != want {
			t.Errorf("partition %d of the backup: %v, want two keys of %q", p, got[p], want)
		}
	}

	db, _, err := OpenClusterBackup(to, t.TempDir(), Options{Logger: quietLogger{}, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for p := range 4 {
		var keys []string
		if err := db.ChangelogKeys(p, func(k []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
			t.Fatal(err)
		}
		pos, _, _ := db.ChangelogPosition(p)
		if len(keys) != 2 || pos.Next != int64(20+p) {
			t.Errorf("assembled partition %d: keys %q at %d", p, keys, pos.Next)
		}
		for _, k := range keys {
			if v, _, _ := db.RawGet([]byte(k)); string(v) != map[int]string{0: "a", 1: "a", 2: "b", 3: "b"}[p] {
				t.Errorf("assembled %q = %q", k, v)
			}
		}
	}
	scratch := db.scratch
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(scratch); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the assembled store %s is left after Close: %v", scratch, err)
	}

	// Without node b's part, verify names it, its node and partitions.
	if err := os.RemoveAll(filepath.Join(to, "node-b")); err != nil {
		t.Fatal(err)
	}
	_, err = VerifyClusterBackup(to, quietLogger{})
	if !errors.Is(err, ErrBackupInvalid) || !strings.Contains(err.Error(), "node-b of node b (partitions [2 3]) is missing") {
		t.Errorf("verify without node b's part: %v", err)
	}
}
