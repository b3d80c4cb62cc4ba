package main

// `statefun backup`: a backup of a running runtime's store through its
// state API (POST /backups), and `statefun backup verify`, which checks
// one on this machine (docs/how-to/backup.md).

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spf13/cobra"

	"github.com/statefun-go/statefun/internal/cluster/clusterconfig"
	"github.com/statefun-go/statefun/internal/cluster/seed"
	"github.com/statefun-go/statefun/internal/module"
	"github.com/statefun-go/statefun/internal/store"
	"github.com/statefun-go/statefun/pkg/stateclient"
)

const backupLong = `Makes a running statefun write a consistent backup of its store while it
serves traffic, and prints the backup's manifest once it is complete.

--to is a directory on the host the runtime runs on (not necessarily this
one): an absolute path that does not exist (its parent must) or is an empty
directory. The backup is Pebble's checkpoint of the store — sstables
hard-linked when the directory is on the store's filesystem, copied
otherwise — with statefun-backup.json, the manifest: the store's identity,
format version, point in time (every write acknowledged before it is in the
backup), egress and Kafka source positions, each partition's last commit,
sizes and each file's SHA-256. One backup runs at a time.

To restore, start statefun on a copy of the directory (--data-dir); to look
into one without changing it, statefun run --read-only --data-dir DIR.
docs/how-to/backup.md says what a restore does to Kafka positions and
exactly-once egress markers.

Asked of a cluster node (--server any node), every partition's owner writes
its part, the backup of its store naming the partitions it serves with their
changelog and messages positions, to DIR/node-<node id> on its own host, and
the node asked writes statefun-cluster-backup.json in DIR on its host, listing
every partition and its part; a partition no owner backed up fails the backup,
naming it. Copy the parts next to that manifest, then check it with backup
verify DIR, look into it with statefun run --read-only --data-dir DIR (no
cluster flags), or restore it into a new application with backup seed DIR.`

// newBackupCmd builds `statefun backup` and `statefun backup verify`.
func newBackupCmd(cl *cli) *cobra.Command {
	c := &stateCLI{cli: cl}
	var to, output string
	cmd := &cobra.Command{
		Use:   "backup --to DIR [flags]",
		Short: "Back up a running runtime's store (and verify a backup: backup verify DIR)",
		Long:  backupLong,
		Annotations: map[string]string{synopsisAnnotation: `backup --to DIR [--server URL] [flags]
backup verify DIR
backup seed DIR --cluster-brokers HOSTS --cluster-app-id NEW`},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q%s", args[0], suggest(cmd, args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(c.flags, c.env); err != nil {
				return err
			}
			if to == "" {
				return usagef("--to is required: the directory on the runtime's host to write the backup to")
			}
			client, err := c.client()
			if err != nil {
				return err
			}
			b, err := client.Backup(c.ctx(), to)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(c.stdout, b)
			}
			return writeBackup(c, b)
		},
	}
	fs := cmd.Flags()
	c.bindClientFlags(fs, 30*time.Minute)
	fs.StringVar(&to, "to", "", "directory on the runtime's host to write the backup to (absolute; new or empty)")
	outputVarP(fs, &output, "table", "table", "json")
	cmd.AddCommand(newBackupVerifyCmd(cl), newBackupSeedCmd(cl))
	return cmd
}

func writeBackup(c *stateCLI, b *stateclient.Backup) error {
	if b.Kind == stateclient.ClusterBackupKind {
		fields := [][2]string{
			{"cluster backup", b.Dir + " (the manifest, on the answering node's host)"},
			{"application", b.App},
			{"backup", b.Backup},
			{"taken at", b.TakenAt.UTC().Format(time.RFC3339Nano)},
			{"partitions", fmt.Sprint(b.Partitions)},
		}
		for _, n := range b.Nodes {
			fields = append(fields, [2]string{"node " + n.Node, fmt.Sprintf("%s on its host: partitions %v, %d bytes, checkpoint %v",
				filepath.Join(b.Dir, n.Dir), n.Partitions, n.Bytes, time.Duration(n.CheckpointMillis)*time.Millisecond)})
		}
		fields = append(fields, [2]string{"took", fmt.Sprint(time.Duration(b.TotalMillis) * time.Millisecond)})
		return writeFields(c.stdout, fields)
	}
	return writeFields(c.stdout, [][2]string{
		{"backup", b.Dir + " (on the runtime's host)"},
		{"store", b.Store},
		{"taken at", b.TakenAt.UTC().Format(time.RFC3339Nano)},
		{"format", fmt.Sprint(b.Format)},
		{"partitions", fmt.Sprint(b.Partitions)},
		{"egress position", fmt.Sprint(b.EgressPosition)},
		{"files", fmt.Sprintf("%d, %d bytes", len(b.Files), b.Bytes)},
		{"took", fmt.Sprintf("%v (checkpoint %v)", time.Duration(b.TotalMillis)*time.Millisecond, time.Duration(b.CheckpointMillis)*time.Millisecond)},
	})
}

func newBackupVerifyCmd(c *cli) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "verify DIR",
		Short: "Check a backup on this machine: its files against its manifest, and that its store opens and reads",
		Long: `Checks the backup in DIR, on this machine: every file the manifest lists is
there with its size and SHA-256 and no other is, then opens the store
read-only (nothing in DIR is written) and checks its identity, format version,
partitions and positions against the manifest and that every key and value
reads (Pebble checks each block's checksum). A cluster backup (DIR holds
statefun-cluster-backup.json) is checked part by part so, and for every
partition of the application being in the part the manifest names, at its
position; a part not copied into DIR is named with its node and partitions.
Exit status 1 lists every problem found.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("want one argument, the backup's directory")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			if store.IsClusterBackup(dir) {
				return verifyClusterBackup(c, dir, output)
			}
			v, err := store.VerifyBackup(dir, nil, quietPebble{})
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(c.stdout, map[string]any{"ok": true, "keys": v.Keys, "manifest": v.Manifest})
			}
			m := v.Manifest
			return writeFields(c.stdout, [][2]string{
				{"backup", dir + ": ok"},
				{"store", m.Store},
				{"taken at", m.TakenAt.UTC().Format(time.RFC3339Nano)},
				{"format", fmt.Sprint(m.Format)},
				{"files", fmt.Sprintf("%d, %d bytes, checksums match", len(m.Files), m.Bytes)},
				{"keys read", fmt.Sprint(v.Keys)},
			})
		},
	}
	outputVarP(cmd.Flags(), &output, "table", "table", "json")
	return cmd
}

// verifyClusterBackup checks a cluster backup: its top-level manifest, and
// every node part as a backup of its own.
func verifyClusterBackup(c *cli, dir, output string) error {
	v, err := store.VerifyClusterBackup(dir, quietPebble{})
	if err != nil {
		return err
	}
	m := v.Manifest
	if output == "json" {
		return writeJSON(c.stdout, map[string]any{"ok": true, "manifest": m})
	}
	fields := [][2]string{
		{"cluster backup", dir + ": ok"},
		{"application", m.App},
		{"backup", m.Backup},
		{"taken at", m.TakenAt.UTC().Format(time.RFC3339Nano)},
		{"partitions", fmt.Sprintf("%d, every one present", m.Partitions)},
	}
	for _, n := range v.Nodes {
		fields = append(fields, [2]string{"part " + filepath.Base(n.Manifest.Dir), fmt.Sprintf("node %s, %d files, %d bytes, checksums match, %d keys read",
			n.Manifest.Cluster.Node, len(n.Manifest.Files), n.Manifest.Bytes, n.Keys)})
	}
	return writeFields(c.stdout, fields)
}

// newBackupSeedCmd builds `statefun backup seed`: a cluster backup
// restored into a new cluster-mode application.
func newBackupSeedCmd(c *cli) *cobra.Command {
	var output string
	var props []module.KafkaProperty
	cmd := &cobra.Command{
		Use:   "seed DIR --cluster-brokers HOSTS --cluster-app-id NEW",
		Short: "Restore a cluster backup into a new cluster-mode application: its changelog topic seeded from the backup's partitions",
		Long: `Verifies the cluster backup in DIR (on this machine, every node part copied
into it), then creates the internal topics of the application --cluster-app-id
with the backup's partition count and writes every partition of the backup
into its changelog topic, in one Kafka transaction: the records compaction
would leave, one put per key. The application must be new (its changelog
topic empty). The consumer group's offsets of the Kafka ingress topics are
committed from the positions the backup's partitions hold. Then start the
nodes with --cluster-app-id NEW: each restores its partitions from the
changelog. docs/how-to/backup.md says what is restored and what is not.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("want one argument, the cluster backup's directory")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	brokers := fs.String("cluster-brokers", "", "Kafka bootstrap brokers of the new application, host:port separated by commas")
	bindEnv(fs, "cluster-brokers", "STATEFUN_CLUSTER_BROKERS")
	appID := fs.String("cluster-app-id", "", "the new application's id: names its topics and consumer group")
	replication := fs.Int("cluster-replication", 0, "replication factor of the topics the seed creates; 0 means 3, or the number of brokers when fewer")
	retention := fs.Duration("cluster-messages-retention", clusterconfig.DefaultMessagesRetention, "retention of the messages topic the seed creates; -1s keeps records forever")
	fs.Func("cluster-property", "one Kafka client property `key=value`; repeatable", func(v string) error {
		p, err := clusterconfig.ParsePropertyFlag(v)
		if err != nil {
			return err
		}
		props = append(props, p)
		return nil
	})
	outputVarP(fs, &output, "table", "table", "json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := applyEnv(fs, c.env); err != nil {
			return err
		}
		if *retention == 0 {
			return usagef("--cluster-messages-retention 0: want a duration like 168h, or -1s to keep records forever")
		}
		dir, err := filepath.Abs(args[0])
		if err != nil {
			return err
		}
		// The seed is no node: it publishes no member record and serves
		// nothing, so its advertised URL is never used.
		cfg := &clusterconfig.Config{Brokers: splitList(*brokers), AppID: *appID, NodeID: seed.NodeID, Advertise: "http://127.0.0.1:8070",
			Replication: *replication, MessagesRetention: *retention, Properties: props}
		if err := cfg.Validate(); err != nil {
			return usagef("%v", err)
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Minute)
		defer cancel()
		res, err := seed.Seed(ctx, cfg, dir, quietPebble{}, slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			return err
		}
		if output == "json" {
			return writeJSON(c.stdout, res)
		}
		var total int64
		for _, n := range res.Records {
			total += n
		}
		return writeFields(c.stdout, [][2]string{
			{"seeded", fmt.Sprintf("application %s from %s", res.App.AppID, dir)},
			{"partitions", fmt.Sprint(res.App.Partitions)},
			{"changelog records", fmt.Sprint(total)},
			{"ingress offsets", fmt.Sprint(res.IngressOffsets)},
			{"ingress topics missing", fmt.Sprintf("%v (no offset committed: they start at their startupPosition)", res.MissingTopics)},
			{"took", res.Took.Round(time.Millisecond).String()},
			{"next", "start the nodes with --cluster-app-id " + res.App.AppID},
		})
	}
	return cmd
}

// quietPebble passes Pebble's errors on and drops its information lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)              {}
func (quietPebble) Errorf(format string, args ...any) { log.Printf(format, args...) }
func (quietPebble) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }

var _ pebble.Logger = quietPebble{}
