// Package admin is the admin listener's handler: metrics, health,
// readiness and the operator's console; the state access API mounts
// beside them.
package admin

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/statefun-go/statefun/internal/console"
)

// Health answers readiness: nil when the runtime serves, else why not.
type Health func() error

// Warnings lists what an operator should know while the runtime is ready
// (a function endpoint that is down): /readyz stays 200 and adds them, one
// per line. Nil means none.
type Warnings func() []string

// Handler returns the admin mux: /metrics (Prometheus), /healthz (the
// process is up), /readyz (the runtime is restored and running), and the
// console at /ui/ (docs/how-to/console.md), which calls the state API served
// beside this mux.
func Handler(g prometheus.Gatherer, ready Health, warnings Warnings) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
		if warnings != nil {
			for _, line := range warnings() {
				fmt.Fprintf(w, "warning: %s\n", line)
			}
		}
	})
	ui := console.Handler()
	mux.Handle("/ui", ui)
	mux.Handle(console.Prefix, ui)
	return mux
}
