package app

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/egress"
	"github.com/statefun-go/statefun/internal/functions"
	"github.com/statefun-go/statefun/internal/kafkaclient"
	"github.com/statefun-go/statefun/internal/kafkaegress"
	"github.com/statefun-go/statefun/internal/kafkaingress"
	"github.com/statefun-go/statefun/internal/module"
	"github.com/statefun-go/statefun/internal/store"
)

// kafkaEdges are the module's Kafka ingresses and egresses. The egress
// relays are made before the engine (their Route checks what functions
// send), the ingress consumers after it (they write into it); both start
// once the engine runs and stop before it closes.
type kafkaEdges struct {
	log  *slog.Logger
	ins  []*kafkaingress.Consumer
	outs []*kafkaegress.Relay
}

// kafkaPlan is the module's Kafka ingresses and egresses with their client
// properties mapped, checked once before anything is opened.
type kafkaPlan struct {
	egresses  []egressPlan
	ingresses []ingressPlan
}

type egressPlan struct {
	spec     *module.KafkaEgress
	producer *kafkaclient.Producer
	sem      kafkaegress.Semantic
}

type ingressPlan struct {
	spec     *module.KafkaIngress
	consumer *kafkaclient.Consumer
}

// kafkaEgresses makes a relay per planned io.statefun.kafka.v1/egress and
// binds it, beside the playground egress, in the returned routes.
func kafkaEgresses(mod *module.Module, plan *kafkaPlan, db *store.DB, reg prometheus.Registerer, log *slog.Logger, resets map[string]kafkaegress.MarkerRef) (*kafkaEdges, *egress.Routes, error) {
	k := &kafkaEdges{log: log}
	routes := egress.NewRoutes()
	var topics []string
	for _, eg := range mod.Egresses {
		topics = append(topics, eg.Topics...)
	}
	if len(topics) > 0 {
		if err := routes.Add(egress.PlaygroundID, egress.NewRouter(topics).Route); err != nil {
			return nil, nil, err
		}
	}
	var errs module.Errors
	var em *kafkaegress.Metrics
	if len(plan.egresses) > 0 {
		em = kafkaegress.NewMetrics(reg)
	}
	for _, ep := range plan.egresses {
		eg, p := ep.spec, ep.producer
		warn(log, p.Warnings)
		id := eg.ID.String()
		var reset *kafkaegress.MarkerRef
		if m, ok := resets[id]; ok {
			reset = &m
		}
		r, err := kafkaegress.New(kafkaegress.Config{
			ResetMarker:        reset,
			Operator:           Operator(),
			ID:                 id,
			Brokers:            kafkaclient.Brokers(eg.Address),
			Semantic:           ep.sem,
			TransactionTimeout: eg.TransactionTimeout,
			TransactionalID:    p.TransactionalID,
			ClientOpts:         p.Opts,
			Store:              db,
			Logger:             log,
			Metrics:            em,
		})
		if err != nil {
			errs = append(errs, at(eg.Pos, module.KindKafkaEgress, "", err))
			continue
		}
		if err := routes.Add(id, r.Route); err != nil {
			errs = append(errs, at(eg.Pos, module.KindKafkaEgress, "id", err))
			continue
		}
		k.outs = append(k.outs, r)
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return k, routes, nil
}

// checkResets refuses a --kafka-egress-reset-marker for an egress the
// module does not have as an exactly-once Kafka egress (only those write
// position markers), before anything is opened.
func checkResets(plan *kafkaPlan, resets map[string]kafkaegress.MarkerRef) error {
	for id := range resets {
		if !slices.ContainsFunc(plan.egresses, func(ep egressPlan) bool { return ep.spec.ID.String() == id && ep.sem == kafkaegress.ExactlyOnce }) {
			return fmt.Errorf("app: --kafka-egress-reset-marker %s: the module has no exactly-once Kafka egress %s (only those write position markers)", id, id)
		}
	}
	return nil
}

// keepEgress returns the ids of the Kafka egresses, whose outboxes the
// store's retention must never trim (store.Retention.KeepEgress).
func keepEgress(mod *module.Module) []string {
	var ids []string
	for _, eg := range mod.KafkaEgresses {
		ids = append(ids, eg.ID.String())
	}
	return ids
}

// planKafka maps the client properties of every Kafka ingress and egress
// once, and refuses, before anything is opened (the store included), one
// whose properties cannot be honoured, an egress with an unknown delivery
// semantic or the playground egress's id, and an ingress whose topics
// route to a function type no endpoint serves (its records would wait
// forever).
func planKafka(mod *module.Module, fns *functions.Router) (*kafkaPlan, error) {
	plan := &kafkaPlan{}
	var errs module.Errors
	for _, eg := range mod.KafkaEgresses {
		p, err := kafkaclient.ForEgress(eg, nil)
		if err != nil {
			errs = appendModuleErrors(errs, err)
			continue
		}
		sem, err := kafkaegress.ParseSemantic(string(eg.Semantic))
		if err != nil {
			errs = append(errs, at(eg.Pos, module.KindKafkaEgress, "deliverySemantic", err))
			continue
		}
		if id := eg.ID.String(); id == egress.PlaygroundID {
			errs = append(errs, at(eg.Pos, module.KindKafkaEgress, "id", fmt.Errorf("%s is the playground egress's id", id)))
			continue
		}
		plan.egresses = append(plan.egresses, egressPlan{spec: eg, producer: p, sem: sem})
	}
	for _, in := range mod.KafkaIngresses {
		c, err := kafkaclient.ForIngress(in, nil)
		if err != nil {
			errs = appendModuleErrors(errs, err)
		}
		for _, t := range in.Topics {
			for _, target := range t.Targets {
				if !fns.Serves(target) {
					errs = append(errs, at(t.Pos, module.KindKafkaIngress, "targets",
						fmt.Errorf("topic %s routes to %s, which no endpoint of the module serves", t.Topic, target)))
				}
			}
		}
		if c != nil {
			plan.ingresses = append(plan.ingresses, ingressPlan{spec: in, consumer: c})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return plan, nil
}

// addIngresses creates a consumer per io.statefun.kafka.v1/ingress on eng
// (planned by planKafka). A record's value larger than the
// smallest payload limit of its targets' endpoints becomes a dead letter.
// keepMembership is kafkaingress.Config.KeepMembership of each.
func (k *kafkaEdges) addIngresses(plan *kafkaPlan, fns *functions.Router, eng kafkaingress.Engine, reg prometheus.Registerer, keepMembership bool) error {
	var im *kafkaingress.Metrics
	if len(plan.ingresses) > 0 {
		im = kafkaingress.NewMetrics(reg)
	}
	for _, ip := range plan.ingresses {
		in, c := ip.spec, ip.consumer
		warn(k.log, c.Warnings)
		cfg := ingressConfig(ip, fns, k.log, im)
		cfg.KeepMembership = keepMembership
		consumer, err := kafkaingress.New(cfg, eng)
		if err != nil {
			return at(in.Pos, module.KindKafkaIngress, "", err)
		}
		k.ins = append(k.ins, consumer)
	}
	return nil
}

// ingressConfig is the configuration of a planned Kafka ingress. A
// record's value larger than the smallest payload limit of its targets'
// endpoints becomes a dead letter.
func ingressConfig(ip ingressPlan, fns *functions.Router, log *slog.Logger, im *kafkaingress.Metrics) kafkaingress.Config {
	in, c := ip.spec, ip.consumer
	cfg := kafkaingress.Config{
		ID:              in.ID.String(),
		Brokers:         kafkaclient.Brokers(in.Address),
		GroupID:         in.ConsumerGroupID,
		AutoOffsetReset: in.AutoOffsetReset,
		Startup:         startup(in.Startup),
		ClientOpts:      c.Opts,
		MaxBatchRecords: c.MaxPollRecords,
		Logger:          log,
		Metrics:         im,
	}
	for _, t := range in.Topics {
		cfg.Routes = append(cfg.Routes, kafkaingress.Route{Topic: t.Topic, ValueType: t.ValueType, Targets: t.Targets})
		for _, target := range t.Targets {
			if m := int(fns.MaxMessage(target.Namespace, target.Name)); cfg.MaxValueBytes == 0 || m < cfg.MaxValueBytes {
				cfg.MaxValueBytes = m
			}
		}
	}
	return cfg
}

// start runs the relays on the engine's outbox and the consumers.
func (k *kafkaEdges) start(out kafkaegress.Outbox) {
	for _, r := range k.outs {
		r.Start(out)
	}
	for _, c := range k.ins {
		c.Start()
	}
}

// close stops the consumers (no new input), then the relays; the engine
// closes after them. Safe on a nil receiver.
func (k *kafkaEdges) close() {
	if k == nil {
		return
	}
	for _, c := range k.ins {
		c.Close()
	}
	for _, r := range k.outs {
		r.Close()
	}
}

// ready joins the reasons any Kafka ingress or egress is not connected.
func (k *kafkaEdges) ready() error {
	if k == nil {
		return nil
	}
	var errs []error
	for _, c := range k.ins {
		if err := c.Ready(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range k.outs {
		if err := r.Ready(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startup maps module.yaml's startupPosition to the ingress's.
func startup(s module.StartupPosition) kafkaingress.Startup {
	out := kafkaingress.Startup{Kind: kafkaingress.StartupKind(s.Type), Date: s.Date}
	if len(s.Offsets) > 0 {
		out.SpecificOffsets = map[string]map[int32]int64{}
		for _, o := range s.Offsets {
			if out.SpecificOffsets[o.Topic] == nil {
				out.SpecificOffsets[o.Topic] = map[int32]int64{}
			}
			out.SpecificOffsets[o.Topic][o.Partition] = o.Offset
		}
	}
	return out
}

// at is a module error at pos.
func at(pos module.Position, kind, field string, err error) *module.Error {
	return &module.Error{File: pos.File, Document: pos.Document, Line: pos.Line, Column: pos.Column,
		Kind: kind, Field: field, Msg: err.Error(), Err: err}
}

// appendModuleErrors appends err to errs, flattening module.Errors.
func appendModuleErrors(errs module.Errors, err error) module.Errors {
	var me module.Errors
	if errors.As(err, &me) {
		return append(errs, me...)
	}
	var e *module.Error
	if errors.As(err, &e) {
		return append(errs, e)
	}
	return append(errs, &module.Error{Msg: err.Error(), Err: err})
}

// warn logs the properties a Kafka client ignores, once each.
func warn(log *slog.Logger, ws []*module.Error) {
	for _, w := range ws {
		log.Warn("module: " + w.Error())
	}
}
