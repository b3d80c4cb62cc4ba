package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Bulk jobs in cluster mode (docs/how-to/bulk-jobs.md,
// docs/explanation/cluster.md "Bulk jobs"): three nodes, the counter
// kc/counter of kafkaCounterFn. Helpers are prefixed "cj".

// cjSeed writes count = i to n counters through node n0, 16 at a time:
// most become commands for their owners.
func cjSeed(t *testing.T, n0 *clusterNode, typ string, n int, id func(int) string) {
	t.Helper()
	var wg sync.WaitGroup
	work := make(chan int)
	var failed atomic.Pointer[string]
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				for try := 0; ; try++ {
					r := n0.api(t, http.MethodPut, "/state/"+typ+"/"+id(i)+"/count", strconv.Itoa(i),
						"Content-Type", "text/plain", "Statefun-Type", longType)
					if r.status == http.StatusOK {
						break
					}
					if try == 20 {
						msg := fmt.Sprintf("PUT %s: %d %s", id(i), r.status, r.body)
						failed.Store(&msg)
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if m := failed.Load(); m != nil {
		t.Fatal(*m)
	}
}

// cjJob reads job id from node n; ok is false while no node answers for
// its home partition (it is moving).
func cjJob(t *testing.T, n *clusterNode, id string) (jbJob, string, bool) {
	t.Helper()
	r := n.api(t, http.MethodGet, "/jobs/"+id, "")
	if r.status == http.StatusServiceUnavailable || r.status == 0 {
		return jbJob{}, "", false
	}
	if r.status != http.StatusOK {
		t.Fatalf("GET /jobs/%s from %s: %d %s", id, n.id, r.status, r.body)
	}
	var j jbJob
	var node struct {
		Node string `json:"node"`
	}
	if err := json.Unmarshal(r.body, &j); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(r.body, &node)
	return j, node.Node, true
}

// cjAwait polls job id through n until cond holds.
func cjAwait(t *testing.T, n *clusterNode, id, what string, timeout time.Duration, cond func(jbJob, string) bool) (jbJob, string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j, node, ok := cjJob(t, n, id)
		if ok && cond(j, node) {
			return j, node
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %s not within %v; it is %+v on %q\n%s", id, what, timeout, j, node, n.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cjWrite is an audit record of a job's write.
type cjWrite struct {
	Mutation, Reason, ID, State string
	At                          time.Time
}

// cjWrites counts the audit records of job id's writes by entry, read
// through node n (gathered from every node), and returns them.
func cjWrites(t *testing.T, n *clusterNode, id string) (map[string]int, []cjWrite) {
	t.Helper()
	by := map[string]int{}
	var all []cjWrite
	after := ""
	for {
		path := "/jobs/" + id + "/writes?limit=1000"
		if after != "" {
			path += "&after=" + after
		}
		r := n.api(t, http.MethodGet, path, "")
		for try := 0; r.status == http.StatusServiceUnavailable && try < 10; try++ {
			time.Sleep(time.Second) // a node too busy to answer the gather in time
			r = n.api(t, http.MethodGet, path, "")
		}
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		var page struct {
			Records []cjWrite `json:"records"`
			Next    *string   `json:"next"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Records...)
		for _, w := range page.Records {
			if !strings.Contains(w.Mutation, "-job-"+id+"-") || !strings.HasPrefix(w.Reason, "job "+id) {
				t.Fatalf("a write of job %s has mutation %q, reason %q: the job's id is not in the audit log", id, w.Mutation, w.Reason)
			}
			by[w.ID+"/"+w.State]++
		}
		if page.Next == nil {
			return by, all
		}
		after = *page.Next
	}
}

// TestClusterJobSurvivesKill runs a migration over 2,000 counters spread
// over three nodes while the counter function keeps incrementing some of
// them, and SIGKILLs the node running the job in the middle: the job goes
// on, from its cursor, on the node that takes its home partition. Then
// every counter holds its seed, its increments and the migration once (no
// increment lost, nothing applied twice), the audit log holds one write
// of the job per entry, and the job reverts as one. Orphaned state is
// listed from every node and purged by a job.
func TestClusterJobSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	t.Parallel()
	dk := startDevkafka(t, "-port", "0", "-brokers", "3", "-topic", "counts:3")
	fn := kafkaCounterFn(t, "kc/out")
	nodes := newClusterNodes(t, dk, "cjobs", fn, "node-a", "node-b", "node-c")
	launchAll(t, nodes...)
	const n = 2000
	id := func(i int) string { return fmt.Sprintf("c-%05d", i) }
	cjSeed(t, nodes[0], "kc/counter", n, id)

	// A preview reads every partition through its owner.
	pr := nodes[1].api(t, http.MethodPost, "/jobs/preview?sample=2",
		`{"select":{"type":"kc/counter","idPrefix":"c-","state":"count","where":"value % 2 == 0"},"action":{"op":"set","expr":"value + 1000000"}}`,
		"Content-Type", "application/json")
	var pv struct {
		Counts struct{ Scanned, Matched, Changed int64 }
		Sample []struct{ ID string }
	}
	if pr.status != http.StatusOK || json.Unmarshal(pr.body, &pv) != nil {
		t.Fatalf("preview: %d %s", pr.status, pr.body)
	}
	if pv.Counts.Scanned != n || pv.Counts.Matched != n/2 || pv.Counts.Changed != n/2 || len(pv.Sample) != 2 || pv.Sample[0].ID != id(0) {
		t.Fatalf("preview %s, want %d scanned, %d matched and changed, c-00000 first", pr.body, n, n/2)
	}

	// The node the job is created on runs it (its home partition is one
	// of that node's); the increments go through the two others.
	victim, survivors := nodes[2], nodes[:2]
	const hot = 8
	stride := n / hot
	stop := make(chan struct{})
	var load sync.WaitGroup
	attempted, acked := make([]int, hot), make([]int, hot)
	for h := range hot {
		load.Add(1)
		go func() {
			defer load.Done()
			via := survivors[h%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				attempted[h]++
				if status, err := via.send("/kc/counter/"+id(h*stride), "kc/text", "tick"); err == nil && status == http.StatusOK {
					acked[h]++
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	cr := victim.api(t, http.MethodPost, "/jobs",
		`{"select":{"type":"kc/counter","idPrefix":"c-","state":"count"},"action":{"op":"set","expr":"value + 1000000"},"rate":400,"retries":100,"reason":"cluster migration"}`,
		"Content-Type", "application/json")
	var created struct {
		ID   string `json:"id"`
		Node string `json:"node"`
	}
	if cr.status != http.StatusCreated || json.Unmarshal(cr.body, &created) != nil || created.Node != victim.id {
		t.Fatalf("POST /jobs on %s: %d %s (want 201, the job on %s)", victim.id, cr.status, cr.body, victim.id)
	}
	// Any node answers about the job.
	if _, node := cjAwait(t, nodes[0], created.ID, "progress", 60*time.Second, func(j jbJob, _ string) bool { return j.Counts.Scanned >= 700 }); node != victim.id {
		t.Fatalf("job %s runs on %s, want %s", created.ID, node, victim.id)
	}
	before, _, _ := cjJob(t, nodes[0], created.ID)
	victim.kill()
	killedAt := time.Now()

	resumed, _ := cjAwait(t, nodes[0], created.ID, "going on on a survivor", 120*time.Second, func(j jbJob, node string) bool {
		return node != victim.id
	})
	resumedAfter := time.Since(killedAt)
	// The cursor the survivor found in the changelog: every entry up to
	// it was done before the kill.
	var cur struct {
		Cursor struct{ ID string } `json:"cursor"`
	}
	json.Unmarshal(nodes[0].api(t, http.MethodGet, "/jobs/"+created.ID, "").body, &cur)
	var done int
	if _, err := fmt.Sscanf(cur.Cursor.ID, "c-%d", &done); err != nil {
		t.Fatalf("the job's cursor on the survivor: %q: %v", cur.Cursor.ID, err)
	}
	done++
	j, node := cjAwait(t, nodes[0], created.ID, "done on a survivor", 120*time.Second, func(j jbJob, node string) bool {
		return node != victim.id && j.Status != "running"
	})
	t.Logf("job %s: %d scanned when %s was killed; %d when a survivor answered for it %v after the kill; done on %s %v after the kill: %+v",
		created.ID, before.Counts.Scanned, victim.id, resumed.Counts.Scanned, resumedAfter.Round(time.Millisecond), node, time.Since(killedAt).Round(time.Millisecond), j.Counts)
	close(stop)
	load.Wait()
	if j.Status != "done" || j.Counts.Scanned != n || j.Counts.Changed != n || j.Counts.Conflicts != 0 || j.Counts.Failed != 0 {
		t.Fatalf("job after the kill: %+v, want done with %d scanned and changed", j, n)
	}
	if j.Counts.Retried == 0 {
		t.Logf("no write of the job met a function's write (counts %+v)", j.Counts)
	}

	// Every counter: seed + increments + the migration once.
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < n; i++ {
		lo, hi := int64(i)+1_000_000, int64(i)+1_000_000
		if i%stride == 0 {
			lo, hi = lo+int64(acked[i/stride]), hi+int64(attempted[i/stride])
		}
		for {
			got, status, _, _, err := survivors[i%2].readCount(id(i))
			if err == nil && status == http.StatusOK && got >= lo && got <= hi {
				break
			}
			if err == nil && status == http.StatusOK && got > hi {
				t.Fatalf("%s = %d, want %d to %d: the migration or an increment applied twice", id(i), got, lo, hi)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %d (%d, %v), want %d to %d: an increment or the migration was lost", id(i), got, status, err, lo, hi)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	w, records := cjWrites(t, survivors[1], created.ID)
	// The killed node wrote entries past the cursor the survivor went on
	// from: those the survivor sent again under their ids, and the owners
	// answered with their receipts (one write each, checked below).
	beforeKill := 0
	for _, r := range records {
		if r.At.Before(killedAt) {
			beforeKill++
		}
	}
	if beforeKill <= done {
		t.Fatalf("the killed node wrote %d entries and the survivor went on after %d: no write was sent again, the test shows nothing", beforeKill, done)
	}
	t.Logf("the killed node wrote %d entries; the survivor went on after %d and sent %d of them again", beforeKill, done, beforeKill-done)
	if len(w) != n {
		t.Fatalf("the audit log holds writes of job %s to %d entries, want %d", created.ID, len(w), n)
	}
	for k, c := range w {
		if c != 1 {
			t.Fatalf("the audit log holds %d writes of job %s to %s, want 1", c, created.ID, k)
		}
	}

	// The revert undoes the job as one: every counter no increment
	// reached after the job wrote it is back at its seed; one that was
	// incremented since is a conflict, left as it is.
	// Sent to the node that does not run the job: it goes to the one that
	// does, once.
	other := survivors[0]
	if other.id == node {
		other = survivors[1]
	}
	rr := other.api(t, http.MethodPost, "/jobs/"+created.ID+"/revert", "", "Statefun-Reason", "undo")
	var rev struct {
		ID   string `json:"id"`
		Node string `json:"node"`
	}
	if rr.status != http.StatusCreated || json.Unmarshal(rr.body, &rev) != nil || rev.Node != node {
		t.Fatalf("revert through %s: %d %s (want 201, the revert on %s)", other.id, rr.status, rr.body, node)
	}
	rj, _ := cjAwait(t, other, rev.ID, "revert done", 120*time.Second, func(j jbJob, _ string) bool { return j.Status != "running" })
	if rj.Status != "done" || rj.Counts.Changed+rj.Counts.Conflicts != n || rj.Counts.Conflicts > hot || rj.Counts.Failed != 0 {
		t.Fatalf("revert %+v, want done with %d writes undone or in conflict (at most %d conflicts)", rj, n, hot)
	}
	conflicted := map[string]bool{}
	for _, c := range rj.Conflicts {
		conflicted[c.ID] = true
	}
	for i := 0; i < n; i++ {
		got, status, _, _, err := survivors[i%2].readCount(id(i))
		if err != nil || status != http.StatusOK {
			t.Fatalf("reading %s: %d %v", id(i), status, err)
		}
		lo, hi := int64(i), int64(i)
		if i%stride == 0 {
			lo, hi = lo+int64(acked[i/stride]), hi+int64(attempted[i/stride])
			if conflicted[id(i)] {
				lo, hi = lo+1_000_000, hi+1_000_000
			}
		}
		if got < lo || got > hi {
			t.Fatalf("after the revert %s = %d, want %d to %d (a conflict: %v)", id(i), got, lo, hi, conflicted[id(i)])
		}
	}

	// Orphans: state of a type the module does not deploy, on every
	// partition, listed through one node and purged by a job.
	const orphans = 40
	cjSeed(t, survivors[0], "gone/thing", orphans, func(i int) string { return "o" + strconv.Itoa(i) })
	or := survivors[1].api(t, http.MethodGet, "/orphans", "")
	var ol struct {
		Orphans []struct {
			Namespace, Type, Reason string
			IDs, Entries, Bytes     int64
		} `json:"orphans"`
		Complete bool `json:"complete"`
	}
	if or.status != http.StatusOK || json.Unmarshal(or.body, &ol) != nil || len(ol.Orphans) != 1 || !ol.Complete {
		t.Fatalf("GET /orphans: %d %s", or.status, or.body)
	}
	if o := ol.Orphans[0]; o.Namespace != "gone" || o.Type != "thing" || o.Reason != "type-not-deployed" || o.IDs != orphans || o.Entries != orphans || o.Bytes == 0 {
		t.Fatalf("GET /orphans: %s, want gone/thing with %d ids and entries", or.body, orphans)
	}
	pj := survivors[1].api(t, http.MethodPost, "/jobs", `{"select":{"orphans":true},"action":{"op":"delete"},"reason":"purge"}`, "Content-Type", "application/json")
	var purge struct {
		ID string `json:"id"`
	}
	if pj.status != http.StatusCreated || json.Unmarshal(pj.body, &purge) != nil {
		t.Fatalf("purge: %d %s", pj.status, pj.body)
	}
	p, _ := cjAwait(t, survivors[0], purge.ID, "purge done", 60*time.Second, func(j jbJob, _ string) bool { return j.Status != "running" })
	if p.Status != "done" || p.Counts.Changed != orphans {
		t.Fatalf("purge %+v, want %d deleted", p, orphans)
	}
	or = survivors[0].api(t, http.MethodGet, "/orphans", "")
	if or.status != http.StatusOK || json.Unmarshal(or.body, &ol) != nil || len(ol.Orphans) != 0 {
		t.Fatalf("GET /orphans after the purge: %d %s", or.status, or.body)
	}
	// Every job, from any node.
	lr := survivors[1].api(t, http.MethodGet, "/jobs", "")
	var list struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	if lr.status != http.StatusOK || json.Unmarshal(lr.body, &list) != nil || len(list.Jobs) != 3 || list.Jobs[0].ID != purge.ID {
		t.Fatalf("GET /jobs: %d %s, want the three jobs, newest first", lr.status, lr.body)
	}
}
