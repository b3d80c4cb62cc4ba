package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/cluster/command"
	"github.com/statefun-go/statefun/internal/cluster/node"
	"github.com/statefun-go/statefun/internal/cluster/topics"
	"github.com/statefun-go/statefun/internal/egress"
	"github.com/statefun-go/statefun/internal/engine"
	"github.com/statefun-go/statefun/internal/kafkaclient"
	"github.com/statefun-go/statefun/internal/kafkaegress"
	"github.com/statefun-go/statefun/internal/module"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/store"
)

// This file is what Start does differently in cluster mode
// (docs/cluster.md): the module's edges that cluster mode refuses, the
// application's internal topics and P, the store opened with that P, and
// the Kafka egresses produced in the node's transaction.

// refuseInCluster refuses, before Kafka is contacted or a store opened,
// what a module may hold that cluster mode does not run: the playground
// egress (use a Kafka egress) and Kafka ingresses (not routed yet).
func refuseInCluster(mod *module.Module) error {
	var errs module.Errors
	for _, eg := range mod.Egresses {
		errs = append(errs, at(eg.Pos, module.KindPlaygroundEgress, "",
			fmt.Errorf("cluster mode does not run the playground egress (a record popped from one node would have to be claimed across all of them); send records to an %s and read its topic instead", module.KindKafkaEgress)))
	}
	for _, in := range mod.KafkaIngresses {
		errs = append(errs, at(in.Pos, module.KindKafkaIngress, "",
			errors.New("cluster mode does not run Kafka ingresses yet (consuming them in the node's group and routing their records through the messages topic is not built); run this module embedded, or feed the application through the playground ingress")))
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// ensureApplication makes or checks the application's internal topics and
// returns its P: the store is opened with it.
func ensureApplication(cfg Config) (*topics.Application, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	app, err := topics.Ensure(ctx, cfg.Cluster, cfg.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("cluster: application", "app_id", app.AppID, "partitions", app.Partitions, "created_by", app.CreatedBy, "created_at", app.CreatedAt)
	return app, nil
}

// storeForApplication explains a data directory made with another P than
// the application's.
func storeForApplication(err error, cfg Config, app *topics.Application) error {
	if errors.Is(err, store.ErrPartitionCount) {
		return fmt.Errorf("cluster: the data directory %s belongs to another application or was made with another partition count: application %s has %d partitions (%v); give this node a data directory of its own, or an empty one",
			cfg.DataDir, app.AppID, app.Partitions, err)
	}
	return err
}

// clusterRoutes binds the module's Kafka egresses in cluster mode: their
// records are produced in the node's transaction on the application's
// Kafka, so an egress must name the same brokers; its delivery semantic
// and client properties do not apply (every record is exactly once).
func clusterRoutes(mod *module.Module, cfg Config, maxRecord int) (*egress.Routes, error) {
	routes := egress.NewRoutes()
	var errs module.Errors
	brokers := slices.Sorted(slices.Values(cfg.Cluster.Brokers))
	for _, eg := range mod.KafkaEgresses {
		id := eg.ID.String()
		if got := slices.Sorted(slices.Values(kafkaclient.Brokers(eg.Address))); !slices.Equal(got, brokers) {
			errs = append(errs, at(eg.Pos, module.KindKafkaEgress, "address",
				fmt.Errorf("in cluster mode a Kafka egress's records are produced in the node's transaction on the application's Kafka, so its address must be the cluster brokers %v, not %v", cfg.Cluster.Brokers, got)))
			continue
		}
		if eg.Semantic != "" && eg.Semantic != module.ExactlyOnce {
			cfg.Logger.Info("cluster: a Kafka egress delivers exactly once in cluster mode, whatever its deliverySemantic", "egress", id, "deliverySemantic", eg.Semantic)
		}
		if len(eg.Properties) > 0 {
			cfg.Logger.Warn("cluster: a Kafka egress's properties are ignored in cluster mode: its records are produced by the node's client (--cluster-property)", "egress", id)
		}
		route := func(namespace, typ string, arg *protocol.TypedValue) (string, error) {
			if got := namespace + "/" + typ; got != id {
				return "", fmt.Errorf("the Kafka egress %s got a record for %s", id, got)
			}
			// Checked against the node's producer limit here, as the
			// relay's Route does: a record Outbound could not produce
			// would fail its partition's commit.
			if _, err := kafkaegress.ToRecord(arg, maxRecord); err != nil {
				return "", err
			}
			return id, nil
		}
		if err := routes.Add(id, route); err != nil {
			errs = append(errs, at(eg.Pos, module.KindKafkaEgress, "id", err))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return routes, nil
}

// newNode makes the cluster node over the opened store.
func newNode(cfg Config, db *store.DB, reg prometheus.Registerer) (*node.Node, error) {
	return node.New(node.Config{Cluster: cfg.Cluster, DB: db, Metrics: reg, Logger: cfg.Logger})
}

// newCommands makes what sends the state API's writes about addresses
// owned elsewhere to their owner, through the messages topic.
func newCommands(cfg Config, cn *node.Node, eng *engine.Engine, partitions int) (*command.Sender, error) {
	return command.New(command.Config{Produce: cn.Ingest, Owner: cn.Owner, Self: cfg.Cluster.NodeID,
		Local: eng.WaitReceipt, Partitions: partitions, Budget: cfg.API.MaxWait, Logger: cfg.Logger})
}
