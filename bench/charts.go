package main

import (
	"errors"
	"image/color"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// clientColor gives every client the same colour in every chart.
func clientColor(client string) color.Color {
	// The offload placement: the client's colour, lighter.
	if base, ok := strings.CutSuffix(client, "-offload"); ok {
		r, g, b, _ := clientColor(base).RGBA()
		lift := func(v uint32) uint8 { return uint8((v>>8 + 255) / 2) }
		return color.RGBA{R: lift(r), G: lift(g), B: lift(b), A: 0xff}
	}
	switch client {
	case baseClient:
		return color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}
	case "os2g":
		return color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	case "s3fs":
		return color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	case "rclone":
		return color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	case "limit":
		return color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	case "local":
		return color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
	}
	return color.Black
}

// errPoints are bar tops with min/max whiskers for plotter.YErrorBars.
type errPoints struct {
	x, y, lo, hi []float64
}

func (e errPoints) Len() int                        { return len(e.x) }
func (e errPoints) XY(i int) (float64, float64)     { return e.x[i], e.y[i] }
func (e errPoints) YError(i int) (float64, float64) { return e.lo[i], e.hi[i] }

// throughputChart draws one panel per workload (units differ), a bar per
// client at its median with min–max whiskers.
func throughputChart(figs []figure, path string) error {
	return panelChart(figs, path, func(cs, unit string) string { return unit },
		func(f figure) (float64, float64, float64, bool) {
			return f.Value.Median, f.Value.Min, f.Value.Max, f.Value.N > 0
		})
}

// cpuChart draws the daemon's (for limit: this process's) CPU seconds per
// GiB delivered, one panel per workload, since the scales differ by orders
// of magnitude between large and small transfers.
func cpuChart(figs []figure, path string) error {
	return panelChart(figs, path, func(cs, unit string) string { return "CPU s/GiB" },
		func(f figure) (float64, float64, float64, bool) {
			v := f.CPUPerGiB
			return v, v, v, !math.IsNaN(v) && f.Value.N > 0
		})
}

// panelChart tiles one bar chart per case, three across; value gives a
// client's bar (median, min, max) and whether it has one.
func panelChart(figs []figure, path string, ylabel func(cs, unit string) string,
	value func(figure) (med, lo, hi float64, ok bool)) error {
	var panels []*plot.Plot
	for _, cs := range cases {
		p := plot.New()
		p.Title.Text = cs.Name
		p.Y.Label.Text = ylabel(cs.Name, cs.Unit)
		p.Y.Min = 0
		var names []string
		ep := errPoints{}
		for _, f := range figs {
			med, lo, hi, ok := value(f)
			if f.Case != cs.Name || !ok {
				continue
			}
			i := len(names)
			b, err := plotter.NewBarChart(plotter.Values{med}, vg.Points(18))
			if err != nil {
				return err
			}
			b.XMin = float64(i)
			b.Color = clientColor(f.Client)
			b.LineStyle.Width = 0
			p.Add(b)
			names = append(names, f.Client)
			ep.x = append(ep.x, float64(i))
			ep.y = append(ep.y, med)
			ep.lo = append(ep.lo, med-lo)
			ep.hi = append(ep.hi, hi-med)
		}
		if len(names) == 0 {
			continue
		}
		if eb, err := plotter.NewYErrorBars(ep); err == nil {
			p.Add(eb)
		}
		p.NominalX(names...)
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return errors.New("no figures")
	}
	const cols = 3
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range panels {
		grid[i/cols][i%cols] = p
	}
	img := vgimg.New(vg.Points(300*cols), vg.Points(220*float64(rows)))
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(16), PadY: vg.Points(16),
		PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align(grid, t, dc)
	for j := range grid {
		for i := range grid[j] {
			if grid[j][i] != nil {
				grid[j][i].Draw(canvases[j][i])
			}
		}
	}
	return savePNG(img, path)
}

func savePNG(img *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
