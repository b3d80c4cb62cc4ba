package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statefun-go/statefun/internal/cluster/command"
	"github.com/statefun-go/statefun/internal/cluster/node"
	"github.com/statefun-go/statefun/internal/cluster/refusals"
	"github.com/statefun-go/statefun/internal/cluster/topics"
	"github.com/statefun-go/statefun/internal/cluster/trust"
	"github.com/statefun-go/statefun/internal/egress"
	"github.com/statefun-go/statefun/internal/functions"
	"github.com/statefun-go/statefun/internal/kafkaclient"
	"github.com/statefun-go/statefun/internal/kafkaegress"
	"github.com/statefun-go/statefun/internal/kafkaingress"
	"github.com/statefun-go/statefun/internal/module"
	"github.com/statefun-go/statefun/internal/protocol"
	"github.com/statefun-go/statefun/internal/stateapi"
	"github.com/statefun-go/statefun/internal/store"
)

// This file is what Start does differently in cluster mode
// (docs/explanation/cluster.md): the module's edges that cluster mode refuses, the
// application's internal topics and P, the store opened with that P, and
// the Kafka egresses produced in the node's transaction.

// refuseInCluster refuses, before Kafka is contacted or a store opened,
// what a module may hold that cluster mode does not run: the playground
// egress (use a Kafka egress), a Kafka ingress on other brokers than the
// cluster's, and a topic two Kafka ingresses share or that is one of the
// application's internal topics.
func refuseInCluster(mod *module.Module, cfg Config) error {
	var errs module.Errors
	for _, eg := range mod.Egresses {
		errs = append(errs, at(eg.Pos, module.KindPlaygroundEgress, "",
			fmt.Errorf("cluster mode does not run the playground egress (a record popped from one node would have to be claimed across all of them); send records to an %s and read its topic instead", module.KindKafkaEgress)))
	}
	brokers := slices.Sorted(slices.Values(cfg.Cluster.Brokers))
	internal := map[string]bool{cfg.Cluster.MessagesTopic(): true, cfg.Cluster.ChangelogTopic(): true, cfg.Cluster.MetaTopic(): true}
	seen := map[string]string{}
	for _, in := range mod.KafkaIngresses {
		id := in.ID.String()
		if got := slices.Sorted(slices.Values(kafkaclient.Brokers(in.Address))); !slices.Equal(got, brokers) {
			errs = append(errs, at(in.Pos, module.KindKafkaIngress, "address",
				fmt.Errorf("in cluster mode a Kafka ingress's topics are consumed by the node's group session on the application's Kafka, with its offsets committed in the node's transactions, so its address must be the cluster brokers %v, not %v", cfg.Cluster.Brokers, got)))
		}
		for _, t := range in.Topics {
			switch {
			case internal[t.Topic]:
				errs = append(errs, at(t.Pos, module.KindKafkaIngress, "topic",
					fmt.Errorf("%s is one of the application's internal topics", t.Topic)))
			case seen[t.Topic] != "":
				errs = append(errs, at(t.Pos, module.KindKafkaIngress, "topic",
					fmt.Errorf("topic %s is consumed by the Kafka ingress %s too; in cluster mode the application's consumer group consumes each topic once, so route it from one ingress (a topic may have several targets)", t.Topic, seen[t.Topic])))
			default:
				seen[t.Topic] = id
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// clusterIngresses maps the module's Kafka ingresses for the node's
// session (docs/explanation/cluster.md, "Edges"): routes, bad-record checks and
// startup positions as in embedded mode; the consumer group is the
// application's, so consumerGroupId does not apply, and the client
// properties are the node's.
func clusterIngresses(plan *kafkaPlan, fns *functions.Router, log *slog.Logger, reg prometheus.Registerer) ([]*kafkaingress.Mapping, error) {
	if len(plan.ingresses) == 0 {
		return nil, nil
	}
	im := kafkaingress.NewMetrics(reg)
	var ms []*kafkaingress.Mapping
	for _, ip := range plan.ingresses {
		in := ip.spec
		id := in.ID.String()
		log.Info("cluster: a Kafka ingress is consumed by the application's consumer group; its consumerGroupId does not apply", "ingress", id, "consumerGroupId", in.ConsumerGroupID)
		if len(in.Properties) > 0 {
			log.Warn("cluster: a Kafka ingress's properties are ignored in cluster mode: its topics are consumed by the node's client (--cluster-property)", "ingress", id)
		}
		m, err := kafkaingress.NewMapping(ingressConfig(ip, fns, log, im))
		if err != nil {
			return nil, at(in.Pos, module.KindKafkaIngress, "", err)
		}
		ms = append(ms, m)
	}
	// The node's session consumes them; no embedded consumer runs.
	plan.ingresses = nil
	return ms, nil
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
func clusterRoutes(mod *module.Module, cfg Config, maxRecord int, refused *refusals.Guard) (*egress.Routes, error) {
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
			rec, err := kafkaegress.ToRecord(arg, maxRecord)
			if err != nil {
				return "", err
			}
			// And against what Kafka refused of this node's transactions
			// for good (a topic that does not exist, a record over its
			// limit): produced, it would abort the node's transaction
			// again, with every partition's work in it.
			if err := refused.Check(rec.Topic, len(rec.Key)+len(rec.Value)); err != nil {
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

// newNode makes the cluster node over the opened store, its session
// consuming the module's Kafka ingresses.
func newNode(cfg Config, db *store.DB, reg prometheus.Registerer, plan *kafkaPlan, fns *functions.Router) (*node.Node, error) {
	ins, err := clusterIngresses(plan, fns, cfg.Logger, reg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limit, from, err := topics.MaxMessageBytes(ctx, cfg.Cluster)
	if err != nil {
		// Not fatal: the producer's limit stands, and a record over the
		// brokers' is refused on its first try (session, refusals).
		cfg.Logger.Warn("cluster: could not read the internal topics' max.message.bytes; records are bounded by the producer's max.request.size alone", "err", err)
	}
	return node.New(node.Config{Cluster: cfg.Cluster, DB: db, Metrics: reg, Logger: cfg.Logger, Ingresses: ins,
		MaxMessageBytes: limit, MaxMessageBytesOf: from})
}

// The cluster's command sender is the state API's Commands.
var _ stateapi.Commands = (*command.Sender)(nil)

// newCommands makes what sends the state API's writes about addresses
// owned elsewhere to their owner, through the messages topic; local waits
// for a receipt this node's engine writes (command.Config.Local), and auth
// (nil without a cluster secret) signs its receipt reads.
func newCommands(cfg Config, cn *node.Node, local func(ctx context.Context, id string) (*protocol.Receipt, bool, error), partitions int, auth *trust.NodeAuth) (*command.Sender, error) {
	return command.New(command.Config{Produce: cn.Ingest, Owner: cn.Owner, Self: cfg.Cluster.NodeID,
		Local: local, DecodeReceipt: stateapi.DecodeReceipt, Partitions: partitions, Budget: cfg.API.MaxWait, Logger: cfg.Logger, Auth: auth})
}

// clusterView is a node's view of the cluster as the state API shows it
// (GET /cluster).
func clusterView(v node.View) stateapi.ClusterView {
	ints := func(ps []int32) []int {
		out := make([]int, len(ps))
		for i, p := range ps {
			out[i] = int(p)
		}
		return out
	}
	s := v.Self
	out := stateapi.ClusterView{App: v.App, Partitions: v.Partitions, GroupState: v.GroupState, GroupErr: v.GroupErr, Owners: v.Owners,
		Self: stateapi.ClusterNode{Node: s.Node, AdminURL: s.AdminURL, Ready: s.Ready, NotReady: s.NotReady, Member: s.Member,
			Generation: s.Generation, Serving: ints(s.Serving), Restoring: ints(s.Restoring), Lag: map[int]int64{},
			LastCommit: s.LastCommit, Commits: s.Commits, Aborts: s.Aborts}}
	for p, l := range s.Lag {
		out.Self.Lag[int(p)] = l
	}
	for _, m := range v.Members {
		out.Members = append(out.Members, stateapi.ClusterMember{Node: m.Node, AdminURL: m.AdminURL, StartedAt: m.StartedAt, Distrusted: m.Distrusted})
	}
	return out
}
