package e2e

// `statefun state export` and `statefun state import` against cluster-mode
// applications (docs/how-to/export-import.md, "Cluster mode"): the real
// binary as node and as command, on devkafka.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
)

// cxLine is an exported line without its version, fields in the order the
// export writes them.
type cxLine struct {
	Address struct {
		Namespace string `json:"namespace"`
		Type      string `json:"type"`
		ID        string `json:"id"`
	} `json:"address"`
	State       string          `json:"state"`
	Typename    string          `json:"typename"`
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 *string         `json:"valueBase64,omitempty"`
}

// cxInput is the state the round trip starts from, as exported lines
// without versions, in export order: two function types, ids with a slash,
// a dot, a space and emoji, long values, JSON whose bytes keep their spaces
// (value and valueBase64), binary values (valueBase64 alone) and text.
func cxInput() []string {
	var ls []cxLine
	add := func(ns, typ, id, state, typename string, value string, raw []byte) {
		var l cxLine
		l.Address.Namespace, l.Address.Type, l.Address.ID = ns, typ, id
		l.State, l.Typename = state, typename
		if value != "" {
			l.Value = json.RawMessage(value)
		}
		if raw != nil {
			b := base64.StdEncoding.EncodeToString(raw)
			l.ValueBase64 = &b
		}
		ls = append(ls, l)
	}
	ids := []string{"a/b", "x.y", "sp ace", "é😀", "%2F"}
	for i := range 300 {
		ids = append(ids, fmt.Sprintf("e%03d", i))
	}
	for i, id := range ids {
		add("kc", "counter", id, "count", longType, fmt.Sprint(i*7-50), nil)
		if i%10 == 0 {
			add("kc", "counter", id, "doc", "example/Doc", fmt.Sprintf(`{"k":[1,%d]}`, i), []byte(fmt.Sprintf(`{"k": [1, %d]}`, i)))
		}
		if i%13 == 0 {
			add("kc", "counter", id, "raw", "example/Blob", "", []byte{0, 0xff, byte(i), '\n'})
		}
		if i%4 == 0 {
			add("kc", "extra", id, "note", "io.statefun.types/string", fmt.Sprintf(`"note %d ü"`, i), nil)
		}
	}
	var out []string
	for _, l := range ls {
		b, err := json.Marshal(l)
		if err != nil {
			panic(err)
		}
		out = append(out, string(b))
	}
	return out
}

var cxVersion = regexp.MustCompile(`,"version":"[0-9]+"`)

// cxStrip is an export's lines without their versions, in the export's
// order.
func cxStrip(t *testing.T, out string) []string {
	t.Helper()
	var ls []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		if !cxVersion.MatchString(l) {
			t.Fatalf("an exported line without its version: %s", l)
		}
		ls = append(ls, cxVersion.ReplaceAllString(l, ""))
	}
	return ls
}

func sorted(ls []string) []string {
	out := append([]string(nil), ls...)
	sort.Strings(out)
	return out
}

// cxSame fails t when two lists of lines differ, naming the first
// difference.
func cxSame(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d lines, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%s: line %d is\n  %s\nwant\n  %s", what, i+1, got[i], want[i])
			return
		}
	}
}

// cxRun runs `statefun state <args>` against node n and wants exit 0.
func cxRun(t testing.TB, n *clusterNode, stdin string, args ...string) exCLI {
	t.Helper()
	res := exState(t, n.runtime, strings.NewReader(stdin), args...)
	if res.code != 0 {
		t.Fatalf("statefun state %s on %s: exit %d\n%s", strings.Join(args, " "), n.id, res.code, res.stderr)
	}
	return res
}

// An export from a cluster whose partitions are spread over three nodes
// holds every entry once, whichever node is asked and whatever the page
// size; it is the same, line for line, as the embedded export of the same
// state; imported into another application (two nodes) and into an
// embedded runtime, it exports the same again, values byte for byte.
func TestClusterExportImportRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	input := cxInput()
	inputText := strings.Join(input, "\n") + "\n"

	// Embedded: import the input, export it.
	emb := exRuntime(t, exGreeter(t))
	if res := exState(t, emb, strings.NewReader(inputText), "import"); res.code != 0 {
		t.Fatalf("embedded import: exit %d\n%s", res.code, res.stderr)
	}
	embOut := exState(t, emb, nil, "export")
	if embOut.code != 0 {
		t.Fatalf("embedded export: exit %d\n%s", embOut.code, embOut.stderr)
	}
	embLines := cxStrip(t, embOut.stdout)
	cxSame(t, "the embedded export (sorted) against the input (sorted)", sorted(embLines), sorted(input))

	// Cluster A, three nodes: import the embedded export through node-a.
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	a := startApp(t, dk.brokers, fn, "cexport-a", "node-a", "node-b", "node-c")
	res := cxRun(t, a[0], embOut.stdout, "import")
	if !strings.Contains(res.stderr, fmt.Sprintf("%d lines done (%d written", len(input), len(input))) {
		t.Errorf("the import into cluster A: %s", res.stderr)
	}

	// Export from node-b, and from node-c in pages of 7.
	outB := cxRun(t, a[1], "", "export").stdout
	outC := cxRun(t, a[2], "", "export", "--page-size", "7").stdout
	if outB != outC {
		cxSame(t, "the export from node-c in pages of 7 against node-b's", cxStrip(t, outC), cxStrip(t, outB))
		t.Errorf("the exports of node-b and node-c differ")
	}
	aLines := cxStrip(t, outB)
	cxSame(t, "cluster A's export against the embedded export of the same state", aLines, embLines)

	// Its entries came from every node.
	own := owners(t, dk.brokers, "cexport-a")
	from := map[string]int{}
	for _, l := range exLines(t, outB) {
		from[own[int32(address.Partition(l.Address.ID, 8))]]++
	}
	if len(from) != 3 {
		t.Errorf("the exported entries are in partitions owned by %v; want all three nodes", from)
	}
	t.Logf("exported entries by owner: %v", from)

	// Cluster B, another application of two nodes: import A's export
	// through node-e, export through node-d.
	b := startApp(t, dk.brokers, fn, "cexport-b", "node-d", "node-e")
	cxRun(t, b[1], outB, "import")
	bLines := cxStrip(t, cxRun(t, b[0], "", "export").stdout)
	cxSame(t, "cluster B's export against cluster A's", bLines, aLines)

	// Back into embedded mode: a fresh runtime imports cluster B's export.
	emb2 := exRuntime(t, exGreeter(t))
	if res := exState(t, emb2, strings.NewReader(strings.Join(bLines, "\n")+"\n"), "import"); res.code != 0 {
		t.Fatalf("embedded import of the cluster's export: exit %d\n%s", res.code, res.stderr)
	}
	out2 := exState(t, emb2, nil, "export")
	cxSame(t, "the embedded export of cluster B's export against cluster B's", cxStrip(t, out2.stdout), bLines)
}

// An import into a cluster survives a SIGKILL of the node it was sent to:
// run again with --resume through another node, every line is written,
// each applied exactly once (one audit record per line, under the
// import's id), and the resumed run reports the lines applied before.
// Then another node is SIGKILLed: an export page asked then is whole, or
// (until the partitions have a new owner) a 503 naming them, never a short
// page, and an export started then holds every entry once.
func TestClusterImportResumeAfterNodeSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	nodes := startApp(t, dk.brokers, kafkaCounterFn(t, "kc/out"), "cimport", "node-a", "node-b", "node-c")
	receiver, other := nodes[0], nodes[1]
	const lines = 3000
	var in strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&in, `{"address":{"namespace":"kc","type":"counter","id":"r%d"},"state":"count","typename":"%s","value":%d}`+"\n", i, longType, i)
	}
	file := filepath.Join(t.TempDir(), "state.jsonl")
	if err := os.WriteFile(file, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(n *clusterNode, extra ...string) (*bytes.Buffer, chan error) {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		cmd := exec.Command(binary, append([]string{"state", "--server", "http://" + n.admin, "import", "--mode", "overwrite", "--batch", "50"}, extra...)...)
		var errb bytes.Buffer
		cmd.Stdin, cmd.Stderr = f, &exSyncWriter{w: &errb}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { cmd.Process.Signal(syscall.SIGKILL) })
		return &errb, done
	}
	// written counts the ids holding state, through node n.
	written := func(n *clusterNode) int {
		total, after := 0, ""
		for {
			r := n.api(t, http.MethodGet, "/state/kc/counter?limit=10000&after="+url.QueryEscape(after), "")
			var p struct {
				IDs  []string
				Next *string
			}
			if r.status != 200 || json.Unmarshal(r.body, &p) != nil {
				return -1
			}
			total += len(p.IDs)
			if p.Next == nil {
				return total
			}
			after = *p.Next
		}
	}

	errb, done := start(receiver, "--retry-for", "2s")
	waitFor(t, 120*time.Second, "a fifth of the import written", func() bool { return written(other) >= lines/5 })
	receiver.kill()
	t.Logf("killed %s, the node the import was sent to", receiver.id)
	if err := <-done; err == nil {
		t.Fatalf("the import did not fail with its node gone:\n%s", errb.String())
	}
	m := exImportID.FindStringSubmatch(errb.String())
	if m == nil || !strings.Contains(errb.String(), "--resume "+m[1]) {
		t.Fatalf("no import id to resume:\n%s", errb.String())
	}
	id := m[1]
	if n := written(other); n >= lines {
		t.Fatalf("the import ended before its node was killed (%d lines)", n)
	}

	// Resume through another node while the killed one's partitions move
	// (and it comes back).
	receiver.launch()
	errb, done = start(other, "--resume", id, "--retry-for", "2m")
	if err := <-done; err != nil {
		t.Fatalf("the resumed import: %v\n%s", err, errb.String())
	}
	t.Logf("resumed: %s", strings.TrimSpace(errb.String()))
	if !regexp.MustCompile(fmt.Sprintf(`%d lines done \([0-9]+ written, [1-9][0-9]* applied before`, lines)).MatchString(errb.String()) {
		t.Errorf("the resumed import's summary:\n%s", errb.String())
	}
	if n := written(other); n != lines {
		t.Errorf("%d ids hold state, want %d", n, lines)
	}
	for _, i := range []int{1, 777, lines / 2, lines} {
		if got, status, _, _, _ := other.readCount(fmt.Sprintf("r%d", i)); status != 200 || got != int64(i) {
			t.Errorf("r%d holds %d (status %d), want %d", i, got, status, i)
		}
	}
	// One audit record per line, gathered from every node.
	perLine := map[int64]int{}
	after := ""
	for {
		r := other.api(t, http.MethodGet, "/audit?namespace=kc&type=counter&limit=10000&after="+url.QueryEscape(after), "")
		var page struct {
			Records           []saAuditImport
			Next              *string
			MissingPartitions []int
		}
		if r.status != 200 || json.Unmarshal(r.body, &page) != nil || len(page.MissingPartitions) > 0 {
			t.Fatalf("GET /audit: %d %s", r.status, r.body)
		}
		for _, rec := range page.Records {
			if rec.Import != id || rec.ID != fmt.Sprintf("r%d", rec.Line) {
				t.Errorf("an audit record of another change: %+v", rec)
				continue
			}
			perLine[rec.Line]++
		}
		if page.Next == nil {
			break
		}
		after = *page.Next
	}
	bad := 0
	for i := int64(1); i <= lines; i++ {
		if perLine[i] != 1 {
			bad++
			if bad <= 10 {
				t.Errorf("line %d applied %d times", i, perLine[i])
			}
		}
	}

	// Export while a node's partitions have no owner.
	victim := nodes[2]
	lost := map[int]bool{}
	for p, n := range owners(t, dk.brokers, "cimport") {
		if n == victim.id {
			lost[int(p)] = true
		}
	}
	victim.kill()
	t.Logf("killed %s, owner of partitions %v", victim.id, lost)
	got := make(chan exCLI, 1)
	go func() { got <- exState(t, other.runtime, nil, "export", "--page-size", "100") }()
	r := other.api(t, http.MethodGet, "/export/kc/counter?limit=10000", "")
	if r.status == 200 {
		// The partitions moved within the budget: the page is whole.
		var page struct {
			Entries []json.RawMessage
			Next    *string
		}
		if err := json.Unmarshal(r.body, &page); err != nil || len(page.Entries) != lines || page.Next != nil {
			t.Errorf("an export page of %d entries answered 200 across the move with %d entries (next %v): a short page", lines, len(page.Entries), page.Next)
		}
		t.Logf("the export page was whole (the partitions moved within the budget)")
	} else if missing := r.header.Get("Statefun-Missing-Partitions"); r.status != 503 || missing == "" || r.header.Get("Retry-After") == "" {
		t.Errorf("an export page while partitions %v have no owner: %d %v %s; want 503 naming them", lost, r.status, r.header, r.body)
	} else {
		t.Logf("an export page while partitions %v have no owner: 503, missing %s", lost, missing)
	}
	res := <-got
	if res.code != 0 {
		t.Fatalf("the export across the move: exit %d\n%s", res.code, res.stderr)
	}
	seen := map[string]int{}
	for _, l := range exLines(t, res.stdout) {
		seen[l.Address.ID]++
		if want := l.Address.ID[1:]; string(l.Value) != want {
			t.Errorf("%s exported with %s, want %s", l.Address.ID, l.Value, want)
		}
	}
	for i := 1; i <= lines; i++ {
		if n := seen[fmt.Sprintf("r%d", i)]; n != 1 {
			t.Errorf("r%d exported %d times across the move", i, n)
		}
	}
	if len(seen) != lines {
		t.Errorf("%d ids exported, want %d", len(seen), lines)
	}
}
