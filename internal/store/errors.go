package store

import (
	"errors"
)

// Errors returned to callers of this package.
var (
	// ErrCorrupt is wrapped by every error that reports a key or value the
	// store holds but cannot decode (a *CorruptionError), and by Open when
	// the store's own meta records are missing or malformed. It is returned
	// by the read and scan methods and by Open; a partition that gets it
	// must stop, as nothing it does would repair the data.
	ErrCorrupt = errors.New("store: corrupt data")

	// ErrFormatTooNew is wrapped by the error Open returns when the store was
	// written with a newer format than FormatVersion, by a newer build of
	// this program. The store is left untouched.
	ErrFormatTooNew = errors.New("store: format is newer than this build knows")

	// ErrPartitionCount is wrapped by the error Open returns when
	// Options.Partitions is set and differs from the partition count the
	// store was created with. The partition count is fixed when an
	// application is created: every stored address and inbox sits in the
	// partition the old count gave it.
	ErrPartitionCount = errors.New("store: partition count differs from the store's")
)

// CorruptionError reports a stored key or value that does not decode. It
// matches ErrCorrupt under errors.Is.
type CorruptionError struct {
	// Key is the key whose key or value is bad.
	Key []byte
	// Err says what is wrong.
	Err error
}

func (e *CorruptionError) Error() string {
	return "store: corrupt data at " + formatKey(e.Key) + ": " + e.Err.Error()
}

// Unwrap returns ErrCorrupt and the cause.
func (e *CorruptionError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// corrupt returns a *CorruptionError for key, copying the key (iterator keys
// are only valid until the iterator moves).
func corrupt(key []byte, err error) error {
	return &CorruptionError{Key: append([]byte(nil), key...), Err: err}
}
