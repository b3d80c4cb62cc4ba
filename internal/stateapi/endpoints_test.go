package stateapi

import (
	"testing"
	"time"
)

// GET /endpoints lists what Options.Endpoints reports, in its order, with
// the time of a change in UTC and null when there was none; without the
// option, an empty list.
func TestEndpointsListsReachability(t *testing.T) {
	eng := startEngine(t, engineConfig{})
	down := time.Date(2026, 12, 2, 5, 0, 0, 0, time.FixedZone("x", 3600))
	api := serve(t, eng, Options{Endpoints: func() []EndpointStatus {
		return []EndpointStatus{
			{Functions: "example/*", URL: "http://functions:8000/", Up: true},
			{Functions: "other/fn", URL: "http://other:8000/", Up: false, Since: down, FailuresInARow: 3, LastError: "connection refused"},
		}
	}})
	var got struct {
		Endpoints []struct {
			Functions, URL string
			Up             bool
			Since          *time.Time
			FailuresInARow int
			LastError      string
		}
	}
	send(t, api, "GET", "/endpoints", nil).json(t, &got)
	if len(got.Endpoints) != 2 || !got.Endpoints[0].Up || got.Endpoints[0].Since != nil ||
		got.Endpoints[1].Up || got.Endpoints[1].Since == nil || !got.Endpoints[1].Since.Equal(down) ||
		got.Endpoints[1].FailuresInARow != 3 || got.Endpoints[1].LastError != "connection refused" {
		t.Errorf("GET /endpoints: %+v", got)
	}
	var none struct{ Endpoints []any }
	send(t, serve(t, eng, Options{}), "GET", "/endpoints", nil).json(t, &none)
	if none.Endpoints == nil || len(none.Endpoints) != 0 {
		t.Errorf("without Endpoints: %+v; want an empty list", none)
	}
}
