package app

import (
	"net"
	"net/http"
	"sync"
)

// closeNewOnShutdown makes srv.Shutdown close, at once, the connections that
// have not sent a request yet. http.Server.Shutdown waits for them until
// they are five seconds old, so an idle TCP connection (a load balancer's
// pre-opened one, a TCP probe) held an idle runtime's exit for up to five
// seconds. Closing them loses nothing: no request has been read from them.
// Connections with a request in progress still get to finish.
func closeNewOnShutdown(srv *http.Server) {
	t := &newConns{conns: map[net.Conn]struct{}{}}
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		t.track(c, s)
		if next != nil {
			next(c, s)
		}
	}
	srv.RegisterOnShutdown(t.closeAll)
}

// newConns is the set of a server's connections in state StateNew.
type newConns struct {
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	shutdown bool
}

func (t *newConns) track(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s != http.StateNew {
		delete(t.conns, c)
		return
	}
	if t.shutdown {
		// Accepted just before the listener closed.
		c.Close()
		return
	}
	t.conns[c] = struct{}{}
}

// closeAll closes the connections without a request, and any that arrive
// from now on.
func (t *newConns) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shutdown = true
	for c := range t.conns {
		c.Close()
	}
	clear(t.conns)
}
