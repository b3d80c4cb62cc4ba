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

// typeGauges are one function type's series of the bulkhead gauges,
// looked up once per bulkhead rather than by label on every call. A nil
// *typeGauges (no Metrics) counts nothing.
type typeGauges struct {
	waiting, inFlight, limit prometheus.Gauge
}

// of returns t's gauges; nil when m is nil.
func (m *Metrics) of(t address.TypeName) *typeGauges {
	if m == nil {
		return nil
	}
	l := t.String()
	return &typeGauges{waiting: m.waitingCalls.WithLabelValues(l), inFlight: m.inFlightCalls.WithLabelValues(l),
		limit: m.callLimit.WithLabelValues(l)}
}

func (g *typeGauges) addWaiting(d float64) {
	if g != nil {
		g.waiting.Add(d)
	}
}

func (g *typeGauges) addInFlight(d float64) {
	if g != nil {
		g.inFlight.Add(d)
	}
}

func (g *typeGauges) setLimit(n int) {
	if g != nil {
		g.limit.Set(float64(n))
	}
}
