//go:build !unix

package connlimit

// NoFile returns 0: the descriptor limit is unknown on this system.
func NoFile() uint64 { return 0 }
