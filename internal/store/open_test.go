package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statefun-go/statefun/internal/protocol"
)

func TestOpenPartitionCount(t *testing.T) {
	fs := vfs.NewMem()
	open := func(p int) (*DB, error) { return Open("db", Options{Partitions: p, FS: fs, Logger: quietLogger{}}) }
	db, err := open(8)
	if err != nil {
		t.Fatal(err)
	}
	if db.Partitions() != 8 {
		t.Errorf("Partitions = %d", db.Partitions())
	}
	_ = db.Close()

	_, err = open(16)
	if !errors.Is(err, ErrPartitionCount) || !strings.Contains(err.Error(), "created with 8 partitions, but 16 are configured") {
		t.Errorf("Open with 16 partitions = %v, want ErrPartitionCount", err)
	}
	// Zero adopts the stored count.
	db, err = open(0)
	if err != nil || db.Partitions() != 8 {
		t.Fatalf("Open with 0 partitions = %v, %v", db, err)
	}
	_ = db.Close()
	db, err = open(8)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	// A new store opened with zero gets the default.
	db, err = Open("other", Options{FS: fs, Logger: quietLogger{}})
	if err != nil || db.Partitions() != DefaultPartitions {
		t.Fatalf("new store with 0 partitions = %v, %v", db, err)
	}
	_ = db.Close()
}

// rewriteMeta opens a store, sets raw keys behind the package's back and
// closes it.
func rewriteMeta(t *testing.T, fs vfs.FS, set map[string][]byte, del ...string) {
	t.Helper()
	pdb, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: quietLogger{}, FormatMajorVersion: pebbleFormat})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		if err := pdb.Set([]byte(k), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range del {
		if err := pdb.Delete([]byte(k), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := pdb.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesNewerFormat(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", Options{Partitions: 4, FS: fs, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	rewriteMeta(t, fs, map[string][]byte{string(metaKey(nil, metaFormat)): appendU32(nil, FormatVersion+1)})

	_, err = Open("db", Options{Partitions: 4, FS: fs, Logger: quietLogger{}})
	if !errors.Is(err, ErrFormatTooNew) || !strings.Contains(err.Error(), "db has format 3, this build reads formats up to 2") {
		t.Errorf("Open of a format-3 store = %v, want ErrFormatTooNew", err)
	}
	// The store is left as it was.
	_, err = Open("db", Options{Partitions: 4, FS: fs, Logger: quietLogger{}})
	if !errors.Is(err, ErrFormatTooNew) {
		t.Errorf("second Open = %v", err)
	}
}

func TestOpenRefusesBadMeta(t *testing.T) {
	for name, tc := range map[string]struct {
		set  map[string][]byte
		del  []string
		want string
	}{
		"format 0": {
			set:  map[string][]byte{"\x00format": {0, 0, 0, 0}},
			want: `meta("format"): format 0 does not exist`,
		},
		"short format": {
			set:  map[string][]byte{"\x00format": {1}},
			want: `meta("format"): meta value is 1 bytes, want 4`,
		},
		"no partitions": {
			del:  []string{"\x00partitions"},
			want: `meta("partitions"): missing`,
		},
		"zero partitions": {
			set:  map[string][]byte{"\x00partitions": {0, 0, 0, 0}},
			want: `meta("partitions"): partition count 0 out of range`,
		},
		"data without format": {
			set:  map[string][]byte{"\x01junk": nil},
			del:  []string{"\x00format", "\x00partitions"},
			want: "holds data but no format record",
		},
	} {
		t.Run(name, func(t *testing.T) {
			fs := vfs.NewMem()
			db, err := Open("db", Options{Partitions: 4, FS: fs, Logger: quietLogger{}})
			if err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			rewriteMeta(t, fs, tc.set, tc.del...)
			_, err = Open("db", Options{Partitions: 4, FS: fs, Logger: quietLogger{}})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open = %v, want corruption %q", err, tc.want)
			}
		})
	}
}

func TestOpenOptions(t *testing.T) {
	for _, o := range []Options{{Partitions: -1}, {Partitions: MaxPartitions + 1}, {CacheSize: -1}} {
		o.FS = vfs.NewMem()
		if db, err := Open("db", o); err == nil || !strings.HasPrefix(err.Error(), "store: Options.") {
			t.Errorf("Open(%+v) = %v, %v; want an options error", o, db, err)
		}
	}
	// The largest partition count works, partition numbers fit in keys.
	db, err := Open("db", Options{Partitions: MaxPartitions, FS: vfs.NewMem(), Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	commit(t, db, func(b *Batch) { b.PutMeta(MaxPartitions-1, PartitionMeta{CommitID: 9}) })
	if m, err := db.Meta(MaxPartitions - 1); err != nil || m.CommitID != 9 {
		t.Errorf("Meta(last) = %+v, %v", m, err)
	}
	// A second Open of the same store fails on Pebble's lock.
	dir := t.TempDir()
	db1, err := Open(dir, Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db1.Close()
	if db2, err := Open(dir, Options{Logger: quietLogger{}}); err == nil {
		_ = db2.Close()
		t.Error("a store opened twice")
	} else if !strings.HasPrefix(err.Error(), "store: open ") {
		t.Errorf("second Open = %v", err)
	}
}

// A format-1 store (inbox keys without an arrival number) is upgraded on
// Open: its inbox keeps every message, numbered in the order a format-1
// build replayed them (by source, then seq), and the format record says 2.
func TestUpgradeFromFormat1(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", Options{Partitions: 4, FS: fs, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	v1 := func(p uint16, source uint32, seq uint64) string {
		k := []byte{spaceInbox}
		k = binary.BigEndian.AppendUint16(k, p)
		k = binary.BigEndian.AppendUint32(k, source)
		return string(binary.BigEndian.AppendUint64(k, seq))
	}
	val := func(s string) []byte { return mustMarshal(envelope(addr("ns", "t", s), s)) }
	rewriteMeta(t, fs, map[string][]byte{
		string(metaKey(nil, metaFormat)): appendU32(nil, 1),
		v1(2, SourceIngress, 9):          val("ingress-9"),
		v1(2, 0, 3):                      val("p0-3"),
		v1(2, 1, 1):                      val("p1-1"),
		v1(3, 0, 1):                      val("p3"),
	})

	db, err = Open("db", Options{Partitions: 4, FS: fs, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got []string
	if err := db.ScanInbox(2, func(k InboxKey, env *protocol.Envelope) error {
		got = append(got, fmt.Sprintf("%d %d %d %s", k.Arrival, k.Source, k.Seq, env.GetArgument().GetValue()))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"0 0 3 p0-3", "1 1 1 p1-1", fmt.Sprintf("2 %d 9 ingress-9", SourceIngress)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("upgraded inbox of partition 2 = %q, want %q", got, want)
	}
	if f, _, _ := db.metaU32(metaFormat); f != FormatVersion {
		t.Fatalf("format after upgrade = %d, want %d", f, FormatVersion)
	}
}
