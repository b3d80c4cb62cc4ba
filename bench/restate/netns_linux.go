package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"unsafe"
)

// netnsEnv is set in a process that runs in the harness's private network
// namespace.
const netnsEnv = "BENCH_RESTATE_NETNS"

// isolate runs the rest of this process's work in a private network
// namespace where only the loopback interface exists, so that nothing the
// benchmark starts can reach another host: restate-server looks for a
// newer release on GitHub at start, and both servers bind loopback only.
//
// Called first thing in main (and TestMain), it re-executes this binary
// with the same arguments in a new namespace (CLONE_NEWNET; with
// CLONE_NEWUSER too when not root), waits for it, and exits with its
// status. In the re-executed process it brings the loopback interface up
// and returns. When namespaces are not allowed here it says so and
// returns: the run goes on in the host's network namespace.
func isolate() {
	if os.Getenv(netnsEnv) != "" {
		if err := loopbackUp(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: bringing up loopback in the private network namespace: %v\n", err)
			os.Exit(1)
		}
		return
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: no private network namespace (%v); running in the host's: every listener is still loopback-only, but restate-server will try to reach GitHub for its release check\n", err)
		return
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	if cmd.ProcessState != nil && cmd.ProcessState.Exited() {
		os.Exit(cmd.ProcessState.ExitCode())
	}
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

// loopbackUp sets the IFF_UP flag of the interface "lo" (ioctl
// SIOCSIFFLAGS), as `ip link set lo up` does.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	// struct ifreq: a 16-byte name, then a union whose first member here
	// is the short ifr_flags.
	var ifr [40]byte
	copy(ifr[:], "lo")
	ioctl := func(req uintptr) error {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
			return e
		}
		return nil
	}
	if err := ioctl(syscall.SIOCGIFFLAGS); err != nil {
		return err
	}
	flags := (*uint16)(unsafe.Pointer(&ifr[16]))
	*flags |= syscall.IFF_UP | syscall.IFF_RUNNING
	return ioctl(syscall.SIOCSIFFLAGS)
}

// childAttr makes a child process get SIGKILL when the harness dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
