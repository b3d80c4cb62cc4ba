package stateapi

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type whoamiJSON struct {
	Principal     string   `json:"principal"`
	Scopes        []string `json:"scopes"`
	Tokens        bool     `json:"tokens"`
	RequireReason bool     `json:"requireReason"`
}

// GET /whoami tells a page what its token may do: the principal and its
// scopes; any valid token may ask, an unknown or missing one is a 401.
func TestWhoami(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	open := serve(t, eng, Options{RequireReason: true})
	tokens := serve(t, eng, Options{Tokens: []Token{tokenRead, tokenWrite, tokenBoth}})

	var who whoamiJSON
	send(t, open, "GET", "/whoami", nil).json(t, &who)
	if who.Principal != "anonymous" || !slices.Equal(who.Scopes, []string{"read", "write"}) || who.Tokens || !who.RequireReason {
		t.Fatalf("without tokens: %+v", who)
	}
	for _, tok := range []Token{tokenRead, tokenWrite, tokenBoth} {
		r := send(t, tokens, "GET", "/whoami", nil, "Authorization", "Bearer "+tok.Secret)
		r.json(t, &who)
		if r.StatusCode != 200 || who.Principal != tok.Name || !slices.Equal(who.Scopes, tok.Scopes) || !who.Tokens || who.RequireReason {
			t.Errorf("token %s: %s %+v", tok.Name, r.Status, who)
		}
	}
	for _, c := range []struct {
		base, target string
		hdr          []string
		status       int
		detail       string
	}{
		{tokens, "/whoami", nil, 401, "a bearer token is required"},
		{tokens, "/whoami", []string{"Authorization", "Bearer not-a-token-0123456789"}, 401, "unknown bearer token"},
		{open, "/whoami?x=1", nil, 400, "takes no parameters"},
	} {
		r := send(t, c.base, "GET", c.target, nil, c.hdr...)
		if r.StatusCode != c.status || !strings.Contains(r.problem(t).Detail, c.detail) {
			t.Errorf("GET %s %v: %s %s", c.target, c.hdr, r.Status, r.body)
		}
		if h := send(t, c.base, "HEAD", c.target, nil, c.hdr...); h.StatusCode != c.status || len(h.body) != 0 {
			t.Errorf("HEAD %s: %s %q", c.target, h.Status, h.body)
		}
	}
	if r := send(t, open, "HEAD", "/whoami", nil); r.StatusCode != 200 || len(r.body) != 0 {
		t.Errorf("HEAD /whoami: %s %q", r.Status, r.body)
	}
	if r := send(t, open, "POST", "/whoami", nil); r.StatusCode != 405 || r.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /whoami: %s Allow %q", r.Status, r.Header.Get("Allow"))
	}
}

type overviewJSON struct {
	Types []struct {
		Namespace   string `json:"namespace"`
		Type        string `json:"type"`
		Registered  bool   `json:"registered"`
		HoldsState  bool   `json:"holdsState"`
		Invocations struct {
			OK    uint64 `json:"ok"`
			Error uint64 `json:"error"`
		} `json:"invocations"`
		Failing        int     `json:"failing"`
		Paused         int     `json:"paused"`
		TypePaused     bool    `json:"typePaused"`
		Queued         int     `json:"queued"`
		Addresses      int     `json:"addresses"`
		Entries        int     `json:"entries"`
		StateBytes     int64   `json:"stateBytes"`
		Complete       bool    `json:"complete"`
		EstimatedBytes *uint64 `json:"estimatedBytes"`
	} `json:"types"`
}

// GET /overview during the incident of TestRepairIncident: the type with
// a poisoned address shows it failing and paused with the messages that
// wait behind it, its invocations by outcome and its state counted; a type
// no longer deployed that still holds state is listed too.
func TestOverview(t *testing.T) {
	fn := &poisonFunction{}
	reg := prometheus.NewRegistry()
	eng := startPolicyEngine(t, fn.start(t), 2, reg)
	api := serve(t, eng, Options{Metrics: reg})
	ingestText(t, eng, "warmup", "w")
	waitFor(t, "test/fn to register its states", func() bool { return len(eng.SpecsOf(fnType)) == len(fnSpecs) })
	waitFor(t, "the warmup message", func() bool { return len(fn.seen("warmup")) == 1 })
	mustPut(t, api, "/state/gone/fn/old/s", "application/octet-stream", "12345", "Statefun-Type", "gone/T")
	mustPut(t, api, "/state/test/fn/x/str", "text/plain", "poison")
	for i := range 3 {
		ingestText(t, eng, "x", fmt.Sprint("m", i))
	}
	waitFor(t, "x to be paused", func() bool {
		f, err := eng.Failing(t.Context(), fnType)
		return err == nil && len(f) == 1 && f[0].Paused
	})
	if r := send(t, api, "POST", "/pause/test/fn", []byte(`{"reason":"deploy"}`)); r.StatusCode != 200 {
		t.Fatalf("pause the type: %s %s", r.Status, r.body)
	}

	var ov overviewJSON
	r := send(t, api, "GET", "/overview", nil)
	r.json(t, &ov)
	if r.StatusCode != 200 || len(ov.Types) != 2 {
		t.Fatalf("GET /overview: %s %s", r.Status, r.body)
	}
	gone, fnov := ov.Types[0], ov.Types[1]
	if gone.Namespace != "gone" || gone.Registered || !gone.HoldsState || gone.Addresses != 1 || gone.Entries != 1 || gone.StateBytes < 5 || !gone.Complete || gone.EstimatedBytes != nil {
		t.Errorf("the type no longer deployed: %+v", gone)
	}
	// warmup holds i64; x holds str (and i64 when it ran, which it did not).
	if fnov.Type != "fn" || !fnov.Registered || !fnov.HoldsState || fnov.Failing != 1 || fnov.Paused != 1 || !fnov.TypePaused ||
		fnov.Queued != 3 || fnov.Addresses != 2 || fnov.Entries != 2 || !fnov.Complete ||
		fnov.Invocations.OK < 1 || fnov.Invocations.Error != 2 {
		t.Errorf("test/fn: %+v\n%s", fnov, r.body)
	}

	for _, c := range []struct {
		target string
		status int
	}{{"/overview?type=test/fn", 400}} {
		if r := send(t, api, "GET", c.target, nil); r.StatusCode != c.status {
			t.Errorf("GET %s: %s %s", c.target, r.Status, r.body)
		}
		if r := send(t, api, "HEAD", c.target, nil); r.StatusCode != c.status {
			t.Errorf("HEAD %s: %s", c.target, r.Status)
		}
	}
	if r := send(t, api, "HEAD", "/overview", nil); r.StatusCode != 200 || len(r.body) != 0 {
		t.Errorf("HEAD /overview: %s %q", r.Status, r.body)
	}

	// Without the metrics registry the figures the metrics hold are zero;
	// the rest is there.
	plain := serve(t, eng, Options{})
	send(t, plain, "GET", "/overview", nil).json(t, &ov)
	if f := ov.Types[1]; f.Failing != 0 || f.Invocations.OK != 0 || f.Queued != 3 || f.Addresses != 2 {
		t.Errorf("without metrics: %+v", f)
	}
}
