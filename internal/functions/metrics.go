package functions

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/address"
)

// Metrics are the bulkheads' Prometheus gauges.
type Metrics struct {
	waitingCalls  *prometheus.GaugeVec
	inFlightCalls *prometheus.GaugeVec
	callLimit     *prometheus.GaugeVec
	endpointUp    *prometheus.GaugeVec
}

// NewMetrics creates the gauges and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		waitingCalls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_function_calls_waiting",
			Help: "Calls waiting because their function type has as many calls in flight as its limit allows, by function type.",
		}, []string{"function"}),
		inFlightCalls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_function_calls_in_flight",
			Help: "Calls sent to remote functions and not answered yet, by function type.",
		}, []string{"function"}),
		callLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_function_calls_limit",
			Help: "The calls in flight a function type may have now: its adaptive limit (docs/reference/limits.md), at most its bulkhead, by function type.",
		}, []string{"function"}),
		endpointUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_function_endpoint_up",
			Help: "1 while a module.yaml endpoint's function server answers, 0 once 3 calls in a row could not connect to it (until one gets an answer), by the functions it serves.",
		}, []string{"endpoint"}),
	}
	if reg != nil {
		reg.MustRegister(m.waitingCalls, m.inFlightCalls, m.callLimit, m.endpointUp)
	}
	return m
}

func (m *Metrics) waiting(t address.TypeName, d float64) {
	if m != nil {
		m.waitingCalls.WithLabelValues(t.String()).Add(d)
	}
}

func (m *Metrics) inFlight(t address.TypeName, d float64) {
	if m != nil {
		m.inFlightCalls.WithLabelValues(t.String()).Add(d)
	}
}

func (m *Metrics) limit(t address.TypeName, n int) {
	if m != nil {
		m.callLimit.WithLabelValues(t.String()).Set(float64(n))
	}
}
