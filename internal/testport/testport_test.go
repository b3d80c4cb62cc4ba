package testport

import (
	"fmt"
	"net"
	"testing"
)

// TestFreeIsBindableDistinctAndBelowEphemeral checks the three promises a
// test relies on when it writes a port into a config file.
func TestFreeIsBindableDistinctAndBelowEphemeral(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if p < low || p >= ephemeralLow() {
			t.Fatalf("port %d outside [%d, %d)", p, low, ephemeralLow())
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		ln.Close()
	}
}
