package simulate

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// WritePlot draws the run's nodes (all and busy) and queued jobs over time
// as an SVG image. The result must come from a Config with SeriesPoints.
func WritePlot(w io.Writer, r Result, title string) error {
	if len(r.Series) == 0 {
		return fmt.Errorf("plotting: the run recorded no time series")
	}
	nodes := make(plotter.XYs, len(r.Series))
	busy := make(plotter.XYs, len(r.Series))
	queued := make(plotter.XYs, len(r.Series))
	for i, p := range r.Series {
		nodes[i] = plotter.XY{X: p.Hours, Y: float64(p.Nodes)}
		busy[i] = plotter.XY{X: p.Hours, Y: float64(p.Busy)}
		queued[i] = plotter.XY{X: p.Hours, Y: float64(p.Queued)}
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "hours since the first submit"
	p.Y.Label.Text = "count (most in each interval)"
	p.Legend.Top = true
	for _, s := range []struct {
		name string
		xys  plotter.XYs
		c    color.RGBA
	}{
		{"nodes", nodes, color.RGBA{R: 31, G: 119, B: 180, A: 255}},
		{"busy nodes", busy, color.RGBA{R: 44, G: 160, B: 44, A: 255}},
		{"queued jobs", queued, color.RGBA{R: 214, G: 39, B: 40, A: 255}},
	} {
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", s.name, err)
		}
		l.Color = s.c
		l.Width = vg.Points(0.8)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	wt, err := p.WriterTo(10*vg.Inch, 5*vg.Inch, "svg")
	if err != nil {
		return fmt.Errorf("plotting: %w", err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("writing plot: %w", err)
	}
	return nil
}
