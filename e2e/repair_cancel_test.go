package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/address"
	"github.com/statefun-go/statefun/internal/sdktest"
)

// A delayed message is kept by its sender's partition, so a cancel of one
// sent to an address of another partition is committed by the sender's
// partition: its receipt names that partition's commit, read back from
// GET /mutations/<id> as it was answered, and its audit record is listed.
// (Read back, the receipt named the target's partition until receipts
// recorded the partition that keeps them; in cluster mode a node that
// owned only one of the two then could not find them.)
func TestCancelDelayedOfAnotherPartition(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		rt, api := saPolicyRuntime(t, e)
		const p = 8 // saStart's partitions, on both engines
		sender, target := "cancel-s", ""
		for i := 0; target == "" || address.Partition(target, p) == address.Partition(sender, p); i++ {
			target = fmt.Sprintf("cancel-t%d", i)
		}
		command(t, rt, sdktest.FeaturesFn, sender, sdktest.Command{Op: sdktest.OpSendAfter, To: &sdktest.Target{ID: target},
			DelayMs: time.Hour.Milliseconds(), Token: "later", Command: &sdktest.Command{Op: sdktest.OpReport, Tag: "never"}})

		var in struct {
			Delayed []struct {
				Timer string `json:"timer"`
				Token string `json:"token"`
			} `json:"delayed"`
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := api.do(http.MethodGet, "/inbox/"+sdktest.FeaturesFn+"/"+target, "")
			if r.status == http.StatusOK && json.Unmarshal(r.body, &in) == nil && len(in.Delayed) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the delayed message from %s never showed in %s's inbox: %s", sender, target, r)
			}
			time.Sleep(50 * time.Millisecond)
		}
		timer := in.Delayed[0].Timer
		if want := fmt.Sprintf("%d/", address.Partition(sender, p)); !strings.HasPrefix(timer, want) {
			t.Fatalf("timer %q: want it kept by the sender's partition (%s…)", timer, want)
		}

		r := api.do(http.MethodPost, "/inbox/"+sdktest.FeaturesFn+"/"+target+"/cancel", `{"timer":"`+timer+`","reason":"not needed"}`,
			"Content-Type", "application/json")
		var answered struct {
			Mutation, Status, Commit string
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &answered) != nil || answered.Status != "committed" {
			t.Fatalf("cancel: %s", r)
		}
		if want := fmt.Sprintf("%d.", address.Partition(sender, p)); !strings.HasPrefix(answered.Commit, want) {
			t.Errorf("the cancel's receipt names commit %q; want one of the sender's partition (%s…)", answered.Commit, want)
		}
		r = api.do(http.MethodGet, "/mutations/"+answered.Mutation, "")
		var read struct{ Mutation, Status, Commit string }
		if r.status != http.StatusOK || json.Unmarshal(r.body, &read) != nil || read != answered {
			t.Errorf("GET /mutations/%s: %s; want the receipt the cancel answered, %+v", answered.Mutation, r, answered)
		}
		r = api.do(http.MethodGet, "/audit?id="+target, "")
		if r.status != http.StatusOK || !strings.Contains(string(r.body), answered.Mutation) {
			t.Errorf("GET /audit?id=%s: %s; want the cancel's record", target, r)
		}
	})
}
