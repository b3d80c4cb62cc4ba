package main

import (
	"fmt"
	"image/color"
	"math"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// writeChart draws one horizontal bar per row: log2 of how many times
// better ours is, so a bar to the right is statefun ahead (green) and one
// to the left is Restate ahead (red); the axis is labeled in "×".
func writeChart(path string, rs []row, when time.Time) error {
	var charted []row
	for _, r := range rs {
		if a := r.advantage(); !math.IsNaN(a) && !math.IsInf(a, 0) {
			charted = append(charted, r)
		}
	}
	n := len(charted)
	ahead, behind := make(plotter.Values, n), make(plotter.Values, n)
	labels := make([]string, n)
	lo, hi := -1.0, 1.0
	for i, r := range charted {
		j := n - 1 - i // the first row on top
		v := math.Log2(r.advantage())
		if v >= 0 {
			ahead[j] = v
		} else {
			behind[j] = v
		}
		labels[j] = r.label()
		lo, hi = min(lo, math.Floor(v)), max(hi, math.Ceil(v))
	}
	p := plot.New()
	p.Title.Padding = vg.Points(8)
	p.Title.Text = fmt.Sprintf("statefun vs Restate %s, %s: how many times better (log scale)", restateVersion, when.UTC().Format("2006-01-02"))
	p.X.Label.Text = "← Restate ahead        statefun ahead →"
	p.X.Min, p.X.Max = lo, hi
	p.X.Tick.Marker = timesTicks{}
	p.Add(plotter.NewGrid())
	width := vg.Points(11)
	for _, s := range []struct {
		v plotter.Values
		c color.Color
	}{{ahead, color.RGBA{R: 46, G: 139, B: 87, A: 255}}, {behind, color.RGBA{R: 205, G: 55, B: 55, A: 255}}} {
		bars, err := plotter.NewBarChart(s.v, width)
		if err != nil {
			return err
		}
		bars.Horizontal = true
		bars.Color = s.c
		bars.LineStyle.Width = 0
		p.Add(bars)
	}
	p.NominalY(labels...)
	p.Y.Tick.Label.Font.Size = vg.Points(9)
	height := vg.Points(float64(16*n + 90))
	return p.Save(9*vg.Inch, height, path)
}

// timesTicks labels a log2 axis in factors: ..., 1/4×, 1/2×, 1×, 2×, 4×, ...
type timesTicks struct{}

func (timesTicks) Ticks(lo, hi float64) []plot.Tick {
	step := math.Max(1, math.Ceil((hi-lo)/12))
	var out []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		label := fmt.Sprintf("%g×", math.Exp2(v))
		if v < 0 {
			label = fmt.Sprintf("1/%g×", math.Exp2(-v))
		}
		out = append(out, plot.Tick{Value: v, Label: label})
	}
	return out
}
