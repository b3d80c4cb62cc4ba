package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/statefun-go/statefun/internal/sdktest"
)

// TestPauseSurvivesSIGKILL pauses an address of an official-Go-SDK
// function, sends it messages through the playground ingress while paused,
// SIGKILLs the runtime in the middle of them and starts it again: the pause
// is still in force, no message was invoked, every acknowledged message is
// in the address's inbox; after the resume each is processed exactly once,
// in arrival order.
func TestPauseSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	onEngines(t, func(t *testing.T, e engine) {
		_, rt, api := saFeatures(t, e)
		const id = "paused"
		saWarm(t, rt, id)

		api.expect(http.StatusOK, http.MethodPost, "/pause/sdktest/features/"+id, `{"reason":"e2e: hold while we crash"}`)
		const n = 12
		msg := func(i int) sdktest.Command { return saSeq(saIncr(), saReport(fmt.Sprint("m-", i))) }
		for i := 1; i <= n/2; i++ {
			saCommand(t, rt, id, msg(i))
		}
		rt.kill()
		rt.start()
		for i := n/2 + 1; i <= n; i++ {
			saCommand(t, rt, id, msg(i))
		}

		// Still paused after the crash, and nothing ran.
		var pauses struct {
			Pauses []struct {
				Namespace, Type string
				ID              *string `json:"id"`
			} `json:"pauses"`
		}
		if err := json.Unmarshal(api.expect(http.StatusOK, http.MethodGet, "/pauses", "").body, &pauses); err != nil {
			t.Fatal(err)
		}
		if len(pauses.Pauses) != 1 || saStr(pauses.Pauses[0].ID) != id {
			t.Fatalf("pauses after SIGKILL = %+v, want the pause of %s", pauses.Pauses, id)
		}
		saAwaitInbox(t, api, id, fmt.Sprintf("all %d acknowledged messages queued after SIGKILL", n),
			func(in saInboxJSON) bool { return in.Queued.Count == n && in.Inflight == nil })
		if p, ok, err := rt.pop(saTopic); err != nil || ok {
			t.Fatalf("a paused address reported %q (%v): it was invoked", p, err)
		}

		api.expect(http.StatusOK, http.MethodPost, "/resume/sdktest/features/"+id, `{"reason":"e2e: done"}`)
		for i := 1; i <= n; i++ {
			rep := saAwaitReport(t, rt, fmt.Sprint("m-", i), 20*time.Second)
			if rep.States.Int64 == nil || *rep.States.Int64 != int64(i) {
				t.Fatalf("m-%d saw the counter at %v, want %d: a message ran twice or out of order", i, rep.States.Int64, i)
			}
		}
		time.Sleep(300 * time.Millisecond)
		if p, ok, _ := rt.pop(saTopic); ok {
			t.Fatalf("an extra report after all %d: %s", n, p)
		}
	})
}
