//go:build !linux && !darwin

package main

import "os"

// isTerminalFile reports whether f is a character device other than the
// null device: without the terminal ioctl, the closest guess.
func isTerminalFile(f *os.File) bool {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(st, null)
}
