//go:build !unix

package lane

import "net"

const supported = false

func descriptor(net.Conn) (int, bool) { return 0, false }

type pollSet struct{}

func (*pollSet) poll(conns []*conn) []bool { return make([]bool, len(conns)) }
