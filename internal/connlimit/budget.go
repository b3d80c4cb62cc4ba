package connlimit

// The file-descriptor budget: the default connection caps are derived from
// the process's RLIMIT_NOFILE so that, with every listener full, the store
// and the connection pools to remote functions still have their
// descriptors.

const (
	// MaxDefaultConns is the largest default cap of one listener. Each open
	// connection costs a goroutine and about 10 KiB of buffers; 4096 of
	// them are about 40 MiB.
	MaxDefaultConns = 4096
	// MinDefaultConns is the smallest default cap of one listener, used when
	// the file-descriptor limit leaves less (the runtime warns).
	MinDefaultConns = 16
	// ReservedFiles is kept for what is not a listener's connection or an
	// outbound pool: the store's open tables (Pebble's default table cache
	// holds up to 1000), its WAL and manifest, logs, DNS and the listening
	// sockets themselves.
	ReservedFiles = 1000 + 256
)

// Budget is how the default connection caps are derived.
type Budget struct {
	// NoFile is the soft RLIMIT_NOFILE; 0 when unknown.
	NoFile uint64
	// Outbound is the number of descriptors the outbound connection pools
	// may hold together (the sum of the endpoints' pool sizes).
	Outbound int
	// Listeners is the number of listeners that share what is left.
	Listeners int
}

// DefaultMaxConns returns the default cap of each listener: what the
// descriptor limit leaves after ReservedFiles and the outbound pools,
// shared between the listeners (each with its overflow room), at most
// MaxDefaultConns and at least MinDefaultConns. ok is false when the floor
// was used because the limit leaves less, so the caller can warn. An
// unknown limit gives MaxDefaultConns.
func DefaultMaxConns(b Budget) (n int, ok bool) {
	if b.NoFile == 0 || b.Listeners <= 0 {
		return MaxDefaultConns, true
	}
	left := int64(min(b.NoFile, 1<<40)) - ReservedFiles - int64(b.Outbound)
	per := left / int64(b.Listeners)
	// Each listener may also hold DefaultOverflow(n) ≈ n/16 overflow
	// connections.
	n64 := per * 16 / 17
	switch {
	case n64 >= MaxDefaultConns:
		return MaxDefaultConns, true
	case n64 < MinDefaultConns:
		return MinDefaultConns, false
	default:
		return int(n64), true
	}
}
