package stateclient_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/statefun-go/statefun/pkg/stateclient"
)

// A type-level pause that a cluster could give only some partitions is a
// 503 naming its mutation id and the partitions missing; sending it again
// with that id completes it. The server here is a double of a cluster
// node answering that way (e2e/cluster_typepause_test.go meets the real
// one, through the CLI, when a node is killed while the pause spreads).
func TestPartialTypePauseCompletedWithItsID(t *testing.T) {
	var got []string // the Statefun-Mutation-Id of each request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Statefun-Mutation-Id"))
		if r.Header.Get("Statefun-Mutation-Id") == "" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":503,"title":"Service Unavailable","detail":"partitions 1, 2 do not have the pause yet","mutation":"m-1","missingPartitions":[1,2]}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"mutation":"m-1","status":"committed","checkpoint":7}`))
	}))
	defer srv.Close()
	c, err := stateclient.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	typ := stateclient.Address{Namespace: "kc", Type: "counter"}
	_, err = c.Pause(ctx, typ, stateclient.PauseOptions{Reason: "deploy"})
	var p *stateclient.ProblemError
	if !errors.As(err, &p) || p.Status != 503 || p.Mutation != "m-1" || !slices.Equal(p.MissingPartitions, []int{1, 2}) {
		t.Fatalf("Pause: %#v; want a 503 naming mutation m-1 and partitions 1, 2", err)
	}
	rc, err := c.Pause(ctx, typ, stateclient.PauseOptions{Reason: "deploy", MutationID: p.Mutation})
	if err != nil || rc.Mutation != "m-1" {
		t.Fatalf("Pause again with its id: %v, %v", rc, err)
	}
	if _, err := c.ResumeWith(ctx, typ, stateclient.ResumeOptions{MutationID: "m-2"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"", "m-1", "m-2"}) {
		t.Errorf("Statefun-Mutation-Id sent: %q", got)
	}
}
