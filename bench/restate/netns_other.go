//go:build !linux

package main

import "syscall"

// isolate does nothing off Linux: the run uses the host's network
// namespace (every listener is still loopback-only).
func isolate() {}

// childAttr has nothing to add off Linux.
func childAttr() *syscall.SysProcAttr { return nil }
