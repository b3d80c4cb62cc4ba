// Package testport hands tests loopback TCP ports for processes they start
// and configure by port number (a module.yaml's playground ports, an admin
// address).
//
// The usual trick — listen on port 0, close, pass the number on — races
// with every connection the machine opens meanwhile: the kernel takes the
// local port of an outgoing connection from the same ephemeral range, so a
// busy test run (function calls, Kafka clients, parallel packages) hands
// the "free" port to a client socket before the process under test binds
// it, and the process fails with "address already in use". Ports below
// the ephemeral range are never given out by the kernel; Free picks one
// there at random, checks it can be bound, and never hands it out twice
// in one test binary.
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
)

// low is the bottom of the range Free draws from: above the well-known
// and most registered service ports.
const low = 10000

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Free returns a loopback TCP port below the kernel's ephemeral port range
// that could be bound a moment ago and that no earlier call in this
// process returned. It fails only when no such port is found after many
// tries.
func Free() (int, error) {
	high := ephemeralLow()
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		p := low + rand.IntN(high-low)
		if given[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("testport: no free port in [%d, %d)", low, high)
}

// FreeRange returns the first of n consecutive loopback TCP ports, all
// below the kernel's ephemeral range, that could be bound a moment ago and
// that no earlier call in this process returned (for a process that takes
// a base port and the ones after it, such as cmd/devkafka's brokers). It
// fails only when no such range is found after many tries.
func FreeRange(n int) (int, error) {
	high := ephemeralLow()
	mu.Lock()
	defer mu.Unlock()
try:
	for range 1000 {
		p := low + rand.IntN(high-low-n)
		for q := p; q < p+n; q++ {
			if given[q] {
				continue try
			}
		}
		for q := p; q < p+n; q++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", q))
			if err != nil {
				continue try
			}
			ln.Close()
		}
		for q := p; q < p+n; q++ {
			given[q] = true
		}
		return p, nil
	}
	return 0, fmt.Errorf("testport: no %d consecutive free ports in [%d, %d)", n, low, high)
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768, its default, elsewhere).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &lo, &hi); err == nil && lo > low+1000 {
			return lo
		}
	}
	return 32768
}
