package main

// The -control listener: an HTTP API that makes the fake cluster misbehave
// on purpose, for tests that run devkafka as a process of their own and
// need Kafka faults from outside (a broker refusing EndTxn, a coordinator
// moving). It is as much a development tool as devkafka itself: anyone who
// reaches it can break the cluster, so it listens on loopback only.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const controlUsage = `The -control listener (HTTP, loopback only) injects faults:

  POST   /faults?key=EndTxn&error=UNKNOWN_SERVER_ERROR&count=2
         fail the next count requests of that kind (a Kafka request name,
         e.g. EndTxn, TxnOffsetCommit, Heartbeat, Produce) with that Kafka
         error (default UNKNOWN_SERVER_ERROR; count default 1, -1 until
         removed); optional filters group=, txn= (transactional id),
         topic=, partition=, node= (broker id), commit=true|false (EndTxn:
         only commits or only aborts). Answers {"id": N}.
  GET    /faults/N   {"id", "key", "error", "count", "hits"}: requests failed so far
  DELETE /faults/N   removes fault N
  POST   /coordinators/move    every group and transaction coordinator moves
         (clients hear NOT_COORDINATOR and look them up again)

Partition leaders are not moved: kfake (at the version built in) answers
OffsetForLeaderEpoch for the previous leader epoch with -1 until a batch is
written in the new one, which consumers take for lost records (they reset
to the start and read again).
`

// control serves the fault-injection API over a kfake cluster.
type control struct {
	c      *kfake.Cluster
	mu     sync.Mutex
	next   int
	faults map[int]*injected
}

// injected is one installed fault.
type injected struct {
	ID    int    `json:"id"`
	Key   string `json:"key"`
	Error string `json:"error"`
	Count int    `json:"count"`
	Hits  int    `json:"hits"`
	h     *kfake.FaultHandle
}

// checkControlAddr refuses a -control address that is not host:port on
// loopback.
func checkControlAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-control %q: want host:port: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("-control %q: the control listener must be on loopback (127.0.0.1 or localhost): anyone reaching it can break the cluster", addr)
	}
	return nil
}

// serveControl listens on addr (checked by checkControlAddr) and serves
// the control API until the listener closes.
func serveControl(c *kfake.Cluster, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-control: %w", err)
	}
	ctl := &control{c: c, faults: map[int]*injected{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /faults", ctl.add)
	mux.HandleFunc("GET /faults/{id}", ctl.get)
	mux.HandleFunc("DELETE /faults/{id}", ctl.remove)
	mux.HandleFunc("POST /coordinators/move", func(w http.ResponseWriter, _ *http.Request) {
		c.RehashCoordinators()
		w.WriteHeader(http.StatusNoContent)
	})
	go (&http.Server{Handler: mux}).Serve(ln)
	return ln, nil
}

// requestKey finds a Kafka request kind by its name, case-insensitively.
func requestKey(name string) (kmsg.Key, bool) {
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		if n := kmsg.NameForKey(k); n != "" && strings.EqualFold(n, name) {
			return kmsg.Key(k), true
		}
	}
	return 0, false
}

// kafkaError finds a Kafka error by its name (UNKNOWN_SERVER_ERROR).
func kafkaError(name string) (*kerr.Error, bool) {
	for code := int16(-1); code < 200; code++ {
		var ke *kerr.Error
		if errors.As(kerr.ErrorForCode(code), &ke) && ke.Code == code && strings.EqualFold(ke.Message, name) {
			return ke, true
		}
	}
	return nil, false
}

func (ctl *control) add(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	bad := func(format string, a ...any) { http.Error(w, fmt.Sprintf(format, a...), http.StatusBadRequest) }
	key, ok := requestKey(q.Get("key"))
	if !ok {
		bad("key %q: want a Kafka request name, e.g. EndTxn, TxnOffsetCommit, Heartbeat", q.Get("key"))
		return
	}
	f := kfake.Fault{Keys: []kmsg.Key{key}, Group: q.Get("group"), TxnID: q.Get("txn"), Topic: q.Get("topic"), Err: kerr.UnknownServerError, Count: 1}
	if s := q.Get("error"); s != "" {
		if f.Err, ok = kafkaError(s); !ok {
			bad("error %q: want a Kafka error name, e.g. UNKNOWN_SERVER_ERROR, ILLEGAL_GENERATION", s)
			return
		}
	}
	if s := q.Get("count"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n == 0 || n < -1 {
			bad("count %q: want a positive number of requests, or -1 until removed", s)
			return
		}
		f.Count = n
	}
	if s := q.Get("partition"); s != "" {
		p, err := strconv.ParseInt(s, 10, 32)
		if err != nil || p < 0 {
			bad("partition %q: want a partition number", s)
			return
		}
		f.Partitions = []int32{int32(p)}
	}
	if s := q.Get("node"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			bad("node %q: want a broker id", s)
			return
		}
		f.Nodes = []int32{int32(n)}
	}
	if s := q.Get("commit"); s != "" {
		commit, err := strconv.ParseBool(s)
		if err != nil || key != kmsg.EndTxn {
			bad("commit %q: want true or false, with key=EndTxn", s)
			return
		}
		f.When = func(req kmsg.Request) bool {
			end, ok := req.(*kmsg.EndTxnRequest)
			return ok && end.Commit == commit
		}
	}
	in := &injected{Key: key.Name(), Error: f.Err.Message, Count: f.Count, h: ctl.c.Fault(f)}
	ctl.mu.Lock()
	ctl.next++
	in.ID = ctl.next
	ctl.faults[in.ID] = in
	ctl.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]int{"id": in.ID})
}

func (ctl *control) lookup(w http.ResponseWriter, r *http.Request) *injected {
	id, _ := strconv.Atoi(r.PathValue("id"))
	ctl.mu.Lock()
	in := ctl.faults[id]
	ctl.mu.Unlock()
	if in == nil {
		http.Error(w, fmt.Sprintf("no fault %q", r.PathValue("id")), http.StatusNotFound)
	}
	return in
}

func (ctl *control) get(w http.ResponseWriter, r *http.Request) {
	if in := ctl.lookup(w, r); in != nil {
		out := *in
		out.Hits = in.h.Hits()
		writeJSON(w, http.StatusOK, out)
	}
}

func (ctl *control) remove(w http.ResponseWriter, r *http.Request) {
	if in := ctl.lookup(w, r); in != nil {
		in.h.Remove()
		ctl.mu.Lock()
		delete(ctl.faults, in.ID)
		ctl.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
