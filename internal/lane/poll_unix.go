//go:build unix

package lane

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

const supported = true

// descriptor returns the connection's file descriptor, for poll(2).
func descriptor(c net.Conn) (int, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if err := raw.Control(func(d uintptr) { fd = int(d) }); err != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}

// pollSet asks the kernel which connections are readable, reusing its
// buffers from one look to the next.
type pollSet struct {
	fds   []unix.PollFd
	ready []bool
}

// poll reports, for each connection, whether its descriptor is readable or
// closed (its reader then sees why). It does not block. A descriptor closed
// and reused since its connection was listed can at worst wake a reader for
// nothing; it reads again and waits again.
func (s *pollSet) poll(conns []*conn) []bool {
	s.fds, s.ready = s.fds[:0], s.ready[:0]
	for _, c := range conns {
		s.fds = append(s.fds, unix.PollFd{Fd: int32(c.fd), Events: unix.POLLIN})
		s.ready = append(s.ready, false)
	}
	if len(s.fds) == 0 {
		return s.ready
	}
	n, err := unix.Poll(s.fds, 0)
	if err != nil || n == 0 {
		return s.ready
	}
	for i := range s.fds {
		s.ready[i] = s.fds[i].Revents != 0
	}
	return s.ready
}
