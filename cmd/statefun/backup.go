package main

// `statefun backup`: a backup of a running runtime's store through its
// state API (POST /backups), and `statefun backup verify`, which checks
// one on this machine (docs/how-to/backup.md).

import (
	"fmt"
	"log"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spf13/cobra"

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
exactly-once egress markers.`

// newBackupCmd builds `statefun backup` and `statefun backup verify`.
func newBackupCmd(cl *cli) *cobra.Command {
	c := &stateCLI{cli: cl}
	var to, output string
	cmd := &cobra.Command{
		Use:   "backup --to DIR [flags]",
		Short: "Back up a running runtime's store (and verify a backup: backup verify DIR)",
		Long:  backupLong,
		Annotations: map[string]string{synopsisAnnotation: `backup --to DIR [--server URL] [flags]
backup verify DIR`},
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
	cmd.AddCommand(newBackupVerifyCmd(cl))
	return cmd
}

func writeBackup(c *stateCLI, b *stateclient.Backup) error {
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
reads (Pebble checks each block's checksum). Exit status 1 lists every problem
found.`,
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

// quietPebble passes Pebble's errors on and drops its information lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)              {}
func (quietPebble) Errorf(format string, args ...any) { log.Printf(format, args...) }
func (quietPebble) Fatalf(format string, args ...any) { log.Fatalf(format, args...) }

var _ pebble.Logger = quietPebble{}
