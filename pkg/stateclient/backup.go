package stateclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Backup is the manifest of a backup the runtime wrote (POST /backups).
type Backup struct {
	Kind    string `json:"kind"`
	Version int    `json:"version"`
	// Store is the identity of the store copied; Lineage the stores it
	// was restored from, nearest first.
	Store   string           `json:"store"`
	Lineage []BackupAncestor `json:"lineage,omitempty"`
	// Format is the store's format version; Partitions its partition
	// count.
	Format     int `json:"format"`
	Partitions int `json:"partitions"`
	// DataDir and Dir are the store's directory and the backup's, on the
	// runtime's host.
	DataDir string `json:"dataDir"`
	Dir     string `json:"dir"`
	// TakenAt is the backup's point in time: every write acknowledged
	// before it is in the backup.
	TakenAt          time.Time `json:"takenAt"`
	CheckpointMillis int64     `json:"checkpointMillis"`
	TotalMillis      int64     `json:"totalMillis"`
	// EgressPosition is the highest egress position written; Commits the
	// last commit of each partition.
	EgressPosition uint64         `json:"egressPosition"`
	Commits        []uint64       `json:"commits"`
	Sources        []BackupSource `json:"sources,omitempty"`
	// Bytes is the size of the backup's files; Files each of them.
	Bytes int64        `json:"bytes"`
	Files []BackupFile `json:"files"`

	// A cluster backup (Kind "statefun-cluster-backup") has App, its
	// application id, Backup, its id, Parts, every partition with the
	// node part that holds it and its positions, and Nodes, the node
	// parts; Dir is where this manifest was written, on the host of the
	// node that answered.
	App    string            `json:"app,omitempty"`
	Backup string            `json:"backup,omitempty"`
	Parts  []BackupPartition `json:"parts,omitempty"`
	Nodes  []BackupNodePart  `json:"nodes,omitempty"`
}

// ClusterBackupKind is the Kind of a cluster backup's manifest.
const ClusterBackupKind = "statefun-cluster-backup"

// BackupPartition is one partition of a cluster backup.
type BackupPartition struct {
	Partition int `json:"partition"`
	// Node wrote it, in Dir (relative to the backup's directory).
	Node string `json:"node"`
	Dir  string `json:"dir"`
	// Commit is the partition's last commit; ChangelogNext the offset of
	// its first changelog record not in the backup; MessagesNext the
	// offset of its first messages topic record it had not applied.
	Commit           uint64 `json:"commit"`
	ChangelogNext    int64  `json:"changelogNext"`
	ChangelogTopicID string `json:"changelogTopicId"`
	MessagesNext     int64  `json:"messagesNext"`
	Keys             int64  `json:"keys"`
}

// BackupNodePart is one node's part of a cluster backup.
type BackupNodePart struct {
	Node             string `json:"node"`
	Dir              string `json:"dir"`
	Store            string `json:"store"`
	Partitions       []int  `json:"partitions"`
	CheckpointMillis int64  `json:"checkpointMillis"`
	TotalMillis      int64  `json:"totalMillis"`
	Bytes            int64  `json:"bytes"`
}

// BackupAncestor is a store a backed-up store was restored from.
type BackupAncestor struct {
	Store          string `json:"store"`
	EgressPosition uint64 `json:"egressPosition"`
}

// BackupSource is how far a Kafka ingress had consumed a topic partition.
type BackupSource struct {
	Ingress   string `json:"ingress"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Next      int64  `json:"next"`
}

// BackupFile is one file of a backup, with its SHA-256.
type BackupFile struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Backup makes the runtime write a backup of its store to dir, a
// directory on the runtime's host (not the caller's) that must not exist
// or be empty, and returns its manifest once it is complete. Asked of a
// cluster node, every partition's owner writes its part under dir on its
// own host, and the manifest is the cluster backup's. A backup
// already running is a 409, a destination without room a 507
// (*ProblemError).
func (c *Client) Backup(ctx context.Context, dir string) (*Backup, error) {
	body, err := json.Marshal(map[string]string{"to": dir})
	if err != nil {
		return nil, fmt.Errorf("stateclient: %w", err)
	}
	resp, err := c.do(ctx, request{method: http.MethodPost, url: c.endpoint("backups", nil, nil),
		header: http.Header{"Content-Type": {"application/json"}}, body: body})
	if err != nil {
		return nil, err
	}
	var b Backup
	if err := decodeJSON(resp, &b); err != nil {
		return nil, err
	}
	return &b, nil
}
