package session

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// Status is what a node's session says of itself (GET /cluster): the group
// member it is, the partitions it serves and restores, how far behind
// each one's fetching is, and its last commit.
type Status struct {
	// Member and Generation are the node's consumer group member id and
	// the group's generation it joined in; empty and -1 before it joined.
	Member     string
	Generation int32
	// Serving and Restoring are the partitions the group assigned to the
	// node, in order: restored and served, or still restoring.
	Serving, Restoring []int32
	// Lag is, per serving partition, the records of the messages topic
	// past what the node has fetched (at its last fetch).
	Lag map[int32]int64
	// LastCommit is when the node's last transaction committed (zero:
	// none yet); Commits and Aborts count its transactions since start.
	LastCommit      time.Time
	Commits, Aborts int64
}

// status is the snapshot Status reads, kept by Run's goroutine.
type status struct {
	mu         sync.Mutex
	lag        map[int32]int64
	lastCommit time.Time
	commits    int64
	aborts     int64
}

func (st *status) setLag(p int32, n int64) {
	st.mu.Lock()
	if st.lag == nil {
		st.lag = map[int32]int64{}
	}
	st.lag[p] = n
	st.mu.Unlock()
}

func (st *status) committed(at time.Time) {
	st.mu.Lock()
	st.lastCommit = at
	st.commits++
	st.mu.Unlock()
}

func (st *status) aborted() {
	st.mu.Lock()
	st.aborts++
	st.mu.Unlock()
}

// Status returns what the session says of itself now. It is safe to call
// from any goroutine.
func (s *Session) Status() Status {
	out := Status{Generation: -1}
	select {
	case <-s.built:
		out.Member, out.Generation = s.gts.Client().GroupMetadata()
	default:
	}
	s.partsMu.Lock()
	for p, serving := range s.partsView {
		if serving {
			out.Serving = append(out.Serving, p)
		} else {
			out.Restoring = append(out.Restoring, p)
		}
	}
	s.partsMu.Unlock()
	slices.Sort(out.Serving)
	slices.Sort(out.Restoring)
	s.st.mu.Lock()
	out.Lag = maps.Clone(s.st.lag)
	out.LastCommit, out.Commits, out.Aborts = s.st.lastCommit, s.st.commits, s.st.aborts
	s.st.mu.Unlock()
	for p := range out.Lag {
		if !slices.Contains(out.Serving, p) {
			delete(out.Lag, p)
		}
	}
	return out
}

// publishParts copies the Machine's view of the partitions for Status:
// the Machine is Run's goroutine's alone.
func (s *Session) publishParts() {
	view := map[int32]bool{}
	for _, p := range s.cyc.Owned() {
		view[p] = s.cyc.IsServing(p)
	}
	s.partsMu.Lock()
	s.partsView = view
	s.partsMu.Unlock()
}
