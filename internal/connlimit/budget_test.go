package connlimit

import "testing"

func TestDefaultMaxConnsLeavesRoomForStoreAndOutbound(t *testing.T) {
	for _, c := range []struct {
		b      Budget
		want   int
		wantOK bool
	}{
		{Budget{NoFile: 0, Outbound: 1024, Listeners: 3}, MaxDefaultConns, true},       // unknown limit
		{Budget{NoFile: 1 << 20, Outbound: 1024, Listeners: 3}, MaxDefaultConns, true}, // a common hard limit
		// 4096 descriptors, one endpoint of 1024: (4096-1256-1024)/3 = 605,
		// less a sixteenth-ish for the overflow room.
		{Budget{NoFile: 4096, Outbound: 1024, Listeners: 3}, 605 * 16 / 17, true},
		{Budget{NoFile: 1024, Outbound: 1024, Listeners: 3}, MinDefaultConns, false},
	} {
		n, ok := DefaultMaxConns(c.b)
		if n != c.want || ok != c.wantOK {
			t.Errorf("DefaultMaxConns(%+v) = %d, %t; want %d, %t", c.b, n, ok, c.want, c.wantOK)
		}
		// Whatever the cap, the listeners at cap plus overflow never eat
		// into the reserved and outbound descriptors when the limit allows.
		if ok && c.b.NoFile != 0 && c.b.NoFile < 1<<20 {
			used := c.b.Listeners*(n+DefaultOverflow(n)) + ReservedFiles + c.b.Outbound
			if uint64(used) > c.b.NoFile {
				t.Errorf("%+v: listeners full use %d descriptors of %d", c.b, used, c.b.NoFile)
			}
		}
	}
}
