package inflight

// controller sets the limit from the throughput of successive windows. It
// is pure: no clock, no locks; the Limiter feeds it.
//
// It keeps a base limit and the throughput measured at it, and alternates
// probes around it:
//
//	at base ──(cooldown windows)──> probe up: limit = grow(base)
//	probe up:   rate > baseRate·(1+gainUp) → base = limit, probe up again
//	            otherwise                 → back to base, next probe down
//	probe down: limit = shrink(base)
//	            rate ≥ baseRate·(1−gain)  → base = limit (as much work with fewer calls)
//	            otherwise                 → back to base, next probe up
//
// The window right after a change of the limit is skipped: calls started
// under the old limit fill it. Windows in which no call waited for a slot say nothing about the limit
// (demand was below it): they are skipped, and a probe waits for a window
// that counts.
type controller struct {
	min, max int
	limit    int     // in force
	base     int     // the limit probes start from and return to
	baseRate float64 // units/s measured at base; 0 until measured
	baseLat  float64 // mean seconds in flight of a call at base
	probing  int     // +1 probing up, -1 probing down, 0 at base
	nextDown bool    // the next probe from base goes down
	cooldown int     // windows at base before the next probe
	settling bool    // the limit just changed: the next window is skipped
}

const (
	// gain is the fall in throughput a probe down may show and still be
	// kept, and gainUp the rise a probe up must show: both above the
	// window-to-window noise of a steady load on the benchmark machine, and
	// gainUp the larger, so that where more calls give no more throughput
	// the limit drifts down to the fewest that give it, not up.
	gain   = 0.05
	gainUp = 0.10
	// strongGain is a gain that says the knee is still far: the next
	// probe climbs two steps.
	strongGain = 0.3
	// restWindows is how many counting windows the limit stays at base
	// between probes, once a probe failed.
	restWindows = 4
)

func (c *controller) grow(l int) int   { return min(c.max, max(l+1, l*3/2)) }
func (c *controller) shrink(l int) int { return max(c.min, min(l-1, l*3/4)) }

// observe takes one window: its throughput, the mean time a call of it
// spent in flight (seconds; 0 if unknown), and whether a call waited for a
// slot in it.
func (c *controller) observe(rate, lat float64, waited bool) {
	prev := c.limit
	defer func() {
		// The calls of the window after a change started under the old
		// limit: it measures the change, not the new limit.
		c.settling = c.limit != prev
	}()
	if c.settling {
		return
	}
	if !waited {
		// Demand was below the limit. A probe down that saw no waiting
		// served everything with fewer calls: keep it.
		if c.probing < 0 && rate >= c.baseRate*(1-gain) {
			c.base, c.baseRate, c.baseLat = c.limit, rate, lat
			c.probing, c.cooldown = 0, restWindows
		}
		return
	}
	switch c.probing {
	case +1:
		if rate > c.baseRate*(1+gainUp) && c.real(lat) && c.limit < c.max {
			strong := rate > c.baseRate*(1+strongGain)
			c.base, c.baseRate, c.baseLat = c.limit, rate, lat
			c.limit = c.grow(c.base)
			if strong { // far from the knee: climb faster
				c.limit = c.grow(c.limit)
			}
			return
		}
		if rate > c.baseRate*(1+gainUp) && c.real(lat) { // at the cap: stay there
			c.base, c.baseRate, c.baseLat = c.limit, rate, lat
		}
		c.limit, c.probing, c.nextDown, c.cooldown = c.base, 0, true, restWindows
	case -1:
		if rate >= c.baseRate*(1-gain) {
			c.base, c.baseRate, c.baseLat = c.limit, rate, lat
			if c.limit > c.min {
				c.limit = c.shrink(c.base)
				return
			}
		}
		c.limit, c.probing, c.nextDown, c.cooldown = c.base, 0, false, restWindows
	default:
		// At base, the measures are averaged over the rest windows: one
		// bad window (a garbage collection, a stalled commit) must not be
		// the yardstick the next probe beats.
		if c.baseRate == 0 {
			c.baseRate, c.baseLat = rate, lat
		} else {
			c.baseRate += (rate - c.baseRate) / 2
			c.baseLat += (lat - c.baseLat) / 2
		}
		if c.cooldown > 0 {
			c.cooldown--
			return
		}
		switch {
		case c.nextDown && c.base > c.min:
			c.limit, c.probing = c.shrink(c.base), -1
		case c.base < c.max:
			c.limit, c.probing = c.grow(c.base), +1
		}
	}
}

// starved doubles the limit: calls waited through a whole window in which
// none ended, so no window can judge the limit, and the floor would hold a
// slow function to a few calls a latency. The doubled limit is the new
// base; its throughput is measured once calls end, and the probes down
// that follow keep it only as far as throughput needs.
func (c *controller) starved() {
	c.limit = min(c.max, max(c.limit+1, 2*c.limit))
	c.base, c.baseRate, c.baseLat = c.limit, 0, 0
	c.probing, c.nextDown, c.cooldown, c.settling = 0, true, 0, true
}

// real tells whether a probe up's gain in throughput is the limit's doing,
// from the calls' time in flight: with the limit holding the calls back,
// throughput is calls in flight over time in flight (Little's law), so
// when the probe's extra calls only queue (the function is the
// bottleneck), time in flight grows with the limit and any gain measured
// is noise. A real gain keeps it well under that: less than half the
// limit's growth.
func (c *controller) real(lat float64) bool {
	if lat <= 0 || c.baseLat <= 0 {
		return true
	}
	grew := float64(c.limit)/float64(c.base) - 1
	return lat < c.baseLat*(1+grew/2)
}
