package e2e

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// bkCLI runs `statefun args...` and returns its output and exit code.
func bkCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		t.Fatal(err)
	}
	return string(out), 0
}

// bkManifest is what the tests read of a backup's manifest.
type bkManifest struct {
	Store   string    `json:"store"`
	TakenAt time.Time `json:"takenAt"`
	Files   []struct {
		Name  string `json:"name"`
		Bytes int64  `json:"bytes"`
	} `json:"files"`
}

// bkDo sends a request to the admin listener and returns status and body.
func bkDo(t *testing.T, method, url, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if method == http.MethodPut && strings.Contains(url, "/state/") {
		req.Header.Set("Statefun-Type", saLong)
	}
	if method == http.MethodGet && strings.Contains(url, "/state/") {
		req.Header.Set("Accept", "text/plain")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// bkCopy copies the directory src to dst (which must not exist).
func bkCopy(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

// bkFiles returns every file under dir with the SHA-256 of its bytes and
// its modification time.
func bkFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fmt.Sprintf("%x %d", sha256.Sum256(b), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A backup taken with `statefun backup` while writes and messages go on
// holds every write acknowledged before it started. The runtime is then
// SIGKILLed, its data directory lost, and the backup copied into its place:
// the runtime starts on it without --new-store, with an identity of its
// own, every acknowledged write is there, and it works. `statefun backup
// verify` passes the backup and fails a truncated copy of it.
func TestBackupUnderLoadThenRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary twice under load")
	}
	t.Parallel()
	fn := crashFunction(t, &sdktest.EgressSender{})
	rt := newRuntime(t, fn, []string{"crash"}, []string{"counts", "ticks"})
	rt.start()
	api := "http://" + rt.admin

	// Writes through the state API (each answered once committed) and
	// messages through the ingress, until stopped.
	type write struct {
		key    string
		value  int
		ackAt  time.Time
		status int
	}
	var (
		mu     sync.Mutex
		writes []write
		n      atomic.Int64
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				req, _ := http.NewRequest(http.MethodPut, api+"/state/crash/counter/"+key+"/count", strings.NewReader(strconv.Itoa(i)))
				req.Header.Set("Content-Type", "text/plain")
				req.Header.Set("Statefun-Type", saLong)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return // the runtime was killed
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				writes = append(writes, write{key, i, time.Now(), resp.StatusCode})
				mu.Unlock()
				n.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := rt.send(fmt.Sprintf("/crash/counter/m%d", i%20), "crash/inc", "{}"); err != nil {
				return
			}
		}
	}()
	for n.Load() < 300 {
		time.Sleep(10 * time.Millisecond)
	}

	backup := filepath.Join(t.TempDir(), "backup")
	started := time.Now()
	out, code := bkCLI(t, "backup", "--to", backup, "--server", api, "-o", "json")
	if code != 0 {
		t.Fatalf("statefun backup: exit %d\n%s", code, out)
	}
	var m bkManifest
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("statefun backup -o json: %v\n%s", err, out)
	}
	if m.TakenAt.Before(started.Add(-time.Second)) || len(m.Files) == 0 {
		t.Fatalf("manifest %s", out)
	}
	// A second backup into the same directory is refused: it is not
	// empty.
	if out, code := bkCLI(t, "backup", "--to", backup, "--server", api); code != 1 || !strings.Contains(out, "is not empty") {
		t.Errorf("a backup into a non-empty directory: exit %d\n%s", code, out)
	}
	time.Sleep(200 * time.Millisecond) // writes go on after the backup
	rt.kill()
	close(stop)
	wg.Wait()

	var before []write
	for _, w := range writes {
		if w.status != http.StatusOK {
			t.Fatalf("PUT %s: %d", w.key, w.status)
		}
		if w.ackAt.Before(started) {
			before = append(before, w)
		}
	}
	if len(before) < 300 || len(before) == len(writes) {
		t.Fatalf("%d writes acknowledged before the backup, of %d: the test proves nothing", len(before), len(writes))
	}

	if out, code := bkCLI(t, "backup", "verify", backup); code != 0 || !strings.Contains(out, ": ok") {
		t.Fatalf("statefun backup verify: exit %d\n%s", code, out)
	}
	// A truncated copy fails verification, naming the file.
	damaged := filepath.Join(t.TempDir(), "damaged")
	bkCopy(t, backup, damaged)
	big := m.Files[0]
	for _, f := range m.Files {
		if f.Bytes > big.Bytes {
			big = f
		}
	}
	if err := os.Truncate(filepath.Join(damaged, big.Name), big.Bytes/2); err != nil {
		t.Fatal(err)
	}
	if out, code := bkCLI(t, "backup", "verify", damaged); code != 1 || !strings.Contains(out, big.Name) || !strings.Contains(out, "truncated") {
		t.Errorf("statefun backup verify of a truncated backup: exit %d\n%s", code, out)
	}

	// The data directory is lost; the backup is copied into its place.
	data := filepath.Join(rt.dir, "data")
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	bkCopy(t, backup, data)
	rt.start()
	if !strings.Contains(rt.logs(), "started on a restored backup") {
		t.Errorf("the start on the backup does not say it restored one:\n%s", rt.logs())
	}
	api = "http://" + rt.admin
	for _, w := range before {
		status, body := bkDo(t, "GET", api+"/state/crash/counter/"+w.key+"/count", "", "")
		if status != 200 || body != strconv.Itoa(w.value) {
			t.Fatalf("%s, acknowledged before the backup started: %d %q, want %d", w.key, status, body, w.value)
		}
	}
	// The restored store works: a message is delivered and reported, a
	// write is acknowledged.
	if status, err := rt.send("/crash/counter/after-restore", "crash/inc", "{}"); err != nil || status != 200 {
		t.Fatalf("a message after the restore: %d %v", status, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	found := false
	for !found && time.Now().Before(deadline) {
		p, ok, err := rt.pop("counts")
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(20 * time.Millisecond)
		}
		found = p == "after-restore:1"
	}
	if !found {
		t.Fatal("the message sent after the restore was not delivered")
	}
	if status, body := bkDo(t, "PUT", api+"/state/crash/counter/after-restore/count", "text/plain", "7"); status != 200 {
		t.Fatalf("a write after the restore: %d %s", status, body)
	}
	// And its identity is its own: a backup of it names another store.
	again := filepath.Join(t.TempDir(), "again")
	out, code = bkCLI(t, "backup", "--to", again, "--server", api, "-o", "json")
	var m2 bkManifest
	if code != 0 || json.Unmarshal([]byte(out), &m2) != nil || m2.Store == m.Store || m2.Store == "" {
		t.Fatalf("a backup of the restored store: exit %d, store %q (the original was %s)\n%s", code, m2.Store, m.Store, out)
	}
}

// `statefun run --read-only` over a backup serves reads, inspections and
// the console, refuses every write with a 409 naming read-only mode,
// invokes no function (the backup holds messages waiting for one), and
// leaves every file of the backup as it was.
func TestReadOnlyOverBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary twice")
	}
	t.Parallel()
	fn := crashFunction(t, &sdktest.EgressSender{})
	rt := newRuntimeWith(t, func(in, out int) string {
		// stuck/* has no function server: its messages wait in the inbox.
		return playgroundModule(fn, []string{"crash"}, []string{"counts", "ticks"})(in, out) +
			"\n---\nkind: io.statefun.endpoints.v2/http\nspec:\n  functions: stuck/*\n  urlPathTemplate: http://127.0.0.1:1/none\n"
	})
	rt.start()
	api := "http://" + rt.admin
	if status, body := bkDo(t, "PUT", api+"/state/crash/counter/ro/count", "text/plain", "41"); status != 200 {
		t.Fatalf("PUT: %d %s", status, body)
	}
	for range 3 {
		if status, err := rt.send("/stuck/counter/s1", "crash/inc", "{}"); err != nil || status != 200 {
			t.Fatalf("a message for stuck/counter: %d %v", status, err)
		}
	}
	backup := filepath.Join(t.TempDir(), "backup")
	if status, body := bkDo(t, "POST", api+"/backups", "application/json", `{"to":"`+backup+`"}`); status != 201 {
		t.Fatalf("POST /backups: %d %s", status, body)
	}
	if err := rt.stop(); err != nil {
		t.Fatal(err)
	}
	files := bkFiles(t, backup)

	// The read-only runtime's functions all count their calls.
	var calls atomic.Int64
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "no", 500)
	}))
	t.Cleanup(counting.Close)
	ro := newRuntime(t, counting.URL, []string{"crash", "stuck"}, []string{"counts", "ticks"})
	saStart(ro, "http", http.DefaultClient, "--read-only", "--data-dir", backup)
	api = "http://" + ro.admin

	if status, body := bkDo(t, "GET", api+"/state/crash/counter/ro/count", "", ""); status != 200 || body != "41" {
		t.Errorf("GET in read-only mode: %d %q", status, body)
	}
	if status, body := bkDo(t, "GET", api+"/inbox/stuck/counter/s1", "", ""); status != 200 || strings.Count(body, `"key"`) < 3 {
		t.Errorf("GET the inbox of stuck/counter/s1 in read-only mode: %d %s", status, body)
	}
	if status, body := bkDo(t, "GET", api+"/overview", "", ""); status != 200 {
		t.Errorf("GET /overview in read-only mode: %d %s", status, body)
	}
	if status, body := bkDo(t, "GET", api+"/whoami", "", ""); status != 200 || !strings.Contains(body, `"readOnly": true`) || strings.Contains(body, `"write"`) {
		t.Errorf("GET /whoami in read-only mode: %d %s", status, body)
	}
	if status, _ := bkDo(t, "GET", api+"/ui", "", ""); status != 200 {
		t.Errorf("GET /ui (the console) in read-only mode: %d", status)
	}
	for _, w := range []struct{ method, url, ct, body string }{
		{"PUT", api + "/state/crash/counter/ro/count", "text/plain", "42"},
		{"DELETE", api + "/state/crash/counter/ro/count", "", ""},
		{"DELETE", api + "/state/crash/counter/ro", "", ""},
		{"POST", api + "/pause/crash/counter/ro", "", ""},
		{"POST", api + "/inbox/stuck/counter/s1/skip", "application/json", `{"reason":"x"}`},
		{"POST", api + "/backups", "application/json", `{"to":"/tmp/x"}`},
		{"PUT", ro.ingress + "/crash/counter/ro", "application/vnd.crash/inc", "{}"},
		{"GET", ro.egress + "/counts", "", ""},
	} {
		status, body := bkDo(t, w.method, w.url, w.ct, w.body)
		if status != http.StatusConflict || !strings.Contains(body, "read-only mode") {
			t.Errorf("%s %s in read-only mode: %d %s, want 409 naming read-only mode", w.method, w.url, status, body)
		}
	}
	time.Sleep(time.Second) // a runtime that delivered would have by now
	if n := calls.Load(); n != 0 {
		t.Errorf("the read-only runtime called functions %d times", n)
	}
	if err := ro.stop(); err != nil {
		t.Fatal(err)
	}
	after := bkFiles(t, backup)
	for name, v := range files {
		if after[name] != v {
			t.Errorf("%s of the backup changed in read-only mode", name)
		}
	}
	for name := range after {
		if _, ok := files[name]; !ok {
			t.Errorf("read-only mode added %s to the backup", name)
		}
	}
	if out, code := bkCLI(t, "backup", "verify", backup); code != 0 {
		t.Errorf("statefun backup verify after read-only mode: exit %d\n%s", code, out)
	}
}
