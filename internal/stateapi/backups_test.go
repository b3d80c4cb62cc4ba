package stateapi

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/statefun-go/statefun/internal/cluster/forward"

	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/store"
)

// backupTo is the runtime's Options.Backup over the engine's store.
func backupTo(eng *engine.Engine) BackupFunc {
	return func(_ context.Context, dir, _ string) (*store.BackupManifest, error) {
		return eng.Reads().Backup(dir, store.BackupOptions{})
	}
}

func TestBackupsRoute(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	api := serve(t, eng, Options{Backup: backupTo(eng)})
	mustPut(t, api, "/state/test/fn/b/str", "text/plain", "kept")

	r := send(t, api, "POST", "/backups", []byte(`{"to":"/backup-one"}`), "Content-Type", "application/json")
	if r.StatusCode != http.StatusCreated {
		t.Fatalf("POST /backups: %s %s", r.Status, r.body)
	}
	var m store.BackupManifest
	r.json(t, &m)
	if m.Kind != "statefun-backup" || m.Dir != "/backup-one" || len(m.Files) == 0 || len(m.Commits) != eng.Partitions() {
		t.Errorf("manifest %s", r.body)
	}

	// The same directory again: it is not empty any more.
	for _, c := range []struct {
		body, want string
		status     int
	}{
		{`{"to":"/backup-one"}`, "is not empty", 400},
		{`{"to":"relative"}`, "not a clean absolute path", 400},
		{`{"to":""}`, "is required", 400},
		{`{"dir":"/x"}`, "unknown field", 400},
		{`{"to":"/backup-two","backup":"x"}`, "sent only by the node that coordinates", 400},
		{`not json`, "must be a JSON object", 400},
		{`{"to":"` + strings.Repeat("x", maxBackupBody) + `"}`, "over", 413},
	} {
		r := send(t, api, "POST", "/backups", []byte(c.body), "Content-Type", "application/json")
		if r.StatusCode != c.status || !strings.Contains(string(r.body), c.want) {
			t.Errorf("POST /backups %.40s: %s %s, want %d saying %q", c.body, r.Status, r.body, c.status, c.want)
		}
	}
	if r := send(t, api, "GET", "/backups", nil); r.StatusCode != 405 || r.Header.Get("Allow") != "POST" {
		t.Errorf("GET /backups: %s, Allow %q", r.Status, r.Header.Get("Allow"))
	}

	// What the store's refusals become: a backup running, cluster mode,
	// no room.
	for _, c := range []struct {
		err    error
		status int
	}{
		{store.ErrBackupRunning, 409},
		{fmt.Errorf("%w: in cluster mode the changelog topics are the durable copy", ErrNoBackups), 409},
		{&store.NoRoomError{Dir: "/b", Need: 10 << 20, Free: 1 << 20}, 507},
	} {
		api := serve(t, eng, Options{Backup: func(context.Context, string, string) (*store.BackupManifest, error) { return nil, c.err }})
		r := send(t, api, "POST", "/backups", []byte(`{"to":"/b"}`), "Content-Type", "application/json")
		if r.StatusCode != c.status || !strings.Contains(string(r.body), strings.TrimPrefix(c.err.Error(), "store: ")) {
			t.Errorf("%v: %s %s, want %d", c.err, r.Status, r.body, c.status)
		}
	}
}

// In read-only mode every operation that could change something answers
// 409 naming the mode, and reads still answer.
func TestReadOnlyRefusesEveryWrite(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	rw := serve(t, eng, Options{})
	mustPut(t, rw, "/state/test/fn/ro/str", "text/plain", "there")
	api := serve(t, eng, Options{ReadOnly: true, Backup: backupTo(eng)})
	n := 0
	for _, op := range theSpec(t).ops {
		if slices.Contains([]string{"GET", "HEAD"}, op.method) {
			continue
		}
		r := send(t, api, op.method, fillTemplate(op.template, exampleVals), []byte(`{}`), "Content-Type", "application/json")
		if r.StatusCode != http.StatusConflict || !strings.Contains(string(r.body), "read-only mode") {
			t.Errorf("%s in read-only mode: %s %s, want 409 naming read-only mode", op.key, r.Status, r.body)
		}
		n++
	}
	if n < 10 {
		t.Fatalf("only %d write operations", n)
	}
	if r := send(t, api, "GET", "/state/test/fn/ro/str", nil); r.StatusCode != 200 || string(r.body) != "there" {
		t.Errorf("GET in read-only mode: %s %s", r.Status, r.body)
	}
	// The console asks /whoami what it may show: no write.
	var who struct {
		Scopes   []string `json:"scopes"`
		ReadOnly bool     `json:"readOnly"`
	}
	send(t, api, "GET", "/whoami", nil).json(t, &who)
	if !who.ReadOnly || slices.Contains(who.Scopes, ScopeWrite) || !slices.Contains(who.Scopes, ScopeRead) {
		t.Errorf("GET /whoami in read-only mode: %+v", who)
	}
}

// In cluster mode a backup no owner wrote a part of is a 503 naming the
// missing partitions, and no cluster manifest is written; a directory
// that holds a cluster backup is refused.
func TestClusterBackupMissing(t *testing.T) {
	eng := startWithFunction(t, engineConfig{})
	c := &fakeCluster{}
	api := serve(t, eng, Options{Cluster: c,
		ClusterView: func(context.Context) ClusterView { return ClusterView{App: "shop", Partitions: eng.Partitions()} },
		BackupPart: func(context.Context, string, string, []int, string) (*store.BackupManifest, string, error) {
			t.Error("this node owns nothing and takes no part")
			return nil, "", nil
		}})
	dir := filepath.Join(t.TempDir(), "cb")
	r := send(t, api, "POST", "/backups", []byte(`{"to":"`+dir+`"}`), "Content-Type", "application/json")
	want := forward.FormatPartitions([]int{0, 1, 2, 3})
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get(MissingHeader) != want || !strings.Contains(string(r.body), "no node backed up partitions "+want) {
		t.Errorf("a backup no owner wrote: %s %s %s", r.Status, r.Header.Get(MissingHeader), r.body)
	}
	if store.IsClusterBackup(dir) {
		t.Errorf("an incomplete backup wrote its cluster manifest")
	}
	if len(c.spread) != 1 || !strings.HasSuffix(c.spread[0], " "+want) {
		t.Errorf("spread %q, want the backup to every partition", c.spread)
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, store.ClusterManifestName), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = send(t, api, "POST", "/backups", []byte(`{"to":"`+dir+`"}`), "Content-Type", "application/json")
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(string(r.body), "holds a cluster backup already") {
		t.Errorf("a backup into a cluster backup: %s %s", r.Status, r.body)
	}
}
