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

// TestFreeRangeIsConsecutiveAndNeverShared checks FreeRange's ports are
// bindable, below the ephemeral range, and never handed out again, by
// FreeRange or by Free.
func TestFreeRangeIsConsecutiveAndNeverShared(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p, err := FreeRange(3)
		if err != nil {
			t.Fatal(err)
		}
		for q := p; q < p+3; q++ {
			if q < low || q >= ephemeralLow() {
				t.Fatalf("port %d outside [%d, %d)", q, low, ephemeralLow())
			}
			if seen[q] {
				t.Fatalf("port %d handed out twice", q)
			}
			seen[q] = true
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", q))
			if err != nil {
				t.Fatalf("port %d: %v", q, err)
			}
			ln.Close()
		}
		f, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if seen[f] {
			t.Fatalf("Free handed out %d, which FreeRange gave", f)
		}
		seen[f] = true
	}
}
