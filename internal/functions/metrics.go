package functions

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/address"
)

// Metrics are the bulkheads' Prometheus gauges.
type Metrics struct {
	waitingCalls  *prometheus.GaugeVec
	inFlightCalls *prometheus.GaugeVec
}

// NewMetrics creates the gauges and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		waitingCalls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_function_calls_waiting",
			Help: "Calls waiting because their function type has as many calls in flight as its bulkhead allows, by function type.",
		}, []string{"function"}),
		inFlightCalls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "statefun_function_calls_in_flight",
			Help: "Calls sent to remote functions and not answered yet, by function type.",
		}, []string{"function"}),
	}
	if reg != nil {
		reg.MustRegister(m.waitingCalls, m.inFlightCalls)
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
