package stateapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
)

// problem is an RFC 9457 problem detail, the body of every error.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
	// CurrentVersion accompanies a 412: the entry's version now.
	CurrentVersion *string `json:"currentVersion,omitempty"`
	// Available lists the representations on a 406.
	Available []string `json:"available,omitempty"`
	// Receipt accompanies a rejected mutation.
	Receipt *receiptJSON `json:"receipt,omitempty"`
	// Position accompanies the 412 of a read whose ?minCommit= was not
	// reached: the partition's durable commit.
	Position *string `json:"position,omitempty"`
	// Partition, OwnerNode and OwnerURL accompany the 503 of a request
	// about an address whose partition this node does not own (cluster
	// mode): the partition, the node that owns it and that node's admin
	// URL, when known.
	Partition *int   `json:"partition,omitempty"`
	OwnerNode string `json:"ownerNode,omitempty"`
	OwnerURL  string `json:"ownerUrl,omitempty"`
	// Mutation and MissingPartitions accompany the 503 of a type-level
	// pause or resume that some partitions could not be given (cluster
	// mode): its mutation id, to send again as MutationIDHeader, and the
	// partitions that do not have it.
	Mutation          string `json:"mutation,omitempty"`
	MissingPartitions []int  `json:"missingPartitions,omitempty"`
	// Line accompanies the refusal of an import batch: the line that is
	// bad (import.go).
	Line *int64 `json:"line,omitempty"`
}

func writeProblem(w http.ResponseWriter, r *http.Request, p problem) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	p.Instance = r.URL.RequestURI()
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Del("Content-Length")
	w.WriteHeader(p.Status)
	if r.Method != http.MethodHead {
		json.NewEncoder(w).Encode(p)
	}
}

func fail(w http.ResponseWriter, r *http.Request, status int, detail string) {
	writeProblem(w, r, problem{Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	je := jsonEncoders.Get().(*jsonEncoder)
	je.buf.Reset()
	je.enc.Encode(v)
	w.Write(je.buf.Bytes())
	if je.buf.Cap() <= maxPooledJSON {
		jsonEncoders.Put(je)
	}
}

// jsonEncoder is an indenting encoder with its output buffer. An encoder
// made per answer grew its indentation buffer from nothing every time (a
// handful of allocations per answer); a pooled one keeps both buffers.
type jsonEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// maxPooledJSON is the largest buffer kept for reuse: a large listing's
// does not stay in memory.
const maxPooledJSON = 64 << 10

var jsonEncoders = sync.Pool{New: func() any {
	je := &jsonEncoder{}
	je.enc = json.NewEncoder(&je.buf)
	je.enc.SetIndent("", "  ")
	return je
}}
