//go:build unix

package connlimit

import "syscall"

// NoFile returns the process's soft RLIMIT_NOFILE, or 0 when it cannot be
// read. On Linux the Go runtime raises the soft limit to the hard limit at
// start, so this is the hard limit unless something lowered it since.
func NoFile() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return uint64(r.Cur) // RLIM_INFINITY reads as a huge number, which is right
}
