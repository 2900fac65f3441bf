package main

import (
	"image/color"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
}

// linePanel is a chart panel of counts over time, one line a series.
type linePanel struct {
	title  string
	series map[string]plotter.XYs
}

func depthPanel(title string, series map[string]plotter.XYs) linePanel {
	return linePanel{title: title, series: series}
}

// drawChart writes one panel per scenario: each arm's latency over time
// (log scale), with the phase boundaries marked; then the line panels.
func drawChart(path string, recs []*recorder, titles []string, lines ...linePanel) error {
	plots := make([][]*plot.Plot, len(recs), len(recs)+len(lines))
	for i, rec := range recs {
		p := plot.New()
		p.Title.Text = titles[i]
		p.X.Label.Text = "seconds since the scenario started"
		p.Y.Label.Text = "latency (ms, log)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top = true

		rec.mu.Lock()
		byArm := map[string]plotter.XYs{}
		for _, s := range rec.samples {
			byArm[s.Arm] = append(byArm[s.Arm], plotter.XY{X: s.At.Seconds(), Y: max(0.05, float64(s.Latency.Microseconds())/1000)})
		}
		phases := append([]phase(nil), rec.phases...)
		rec.mu.Unlock()

		arms := make([]string, 0, len(byArm))
		for arm := range byArm {
			arms = append(arms, arm)
		}
		sort.Strings(arms)
		ymax := 1.0
		for j, arm := range arms {
			pts := byArm[arm]
			// Keep the file light: at most 4,000 points an arm, evenly thinned.
			if step := len(pts)/4000 + 1; step > 1 {
				thin := make(plotter.XYs, 0, len(pts)/step+1)
				for k := 0; k < len(pts); k += step {
					thin = append(thin, pts[k])
				}
				pts = thin
			}
			for _, pt := range pts {
				ymax = max(ymax, pt.Y)
			}
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return err
			}
			sc.GlyphStyle.Color = palette[j%len(palette)]
			sc.GlyphStyle.Radius = vg.Points(0.8)
			sc.GlyphStyle.Shape = draw.CircleGlyph{}
			p.Add(sc)
			p.Legend.Add(arm, sc)
		}
		for _, ph := range phases {
			x := ph.Start.Seconds()
			ln, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0.05}, {X: x, Y: ymax}})
			if err != nil {
				return err
			}
			ln.LineStyle.Color = color.Gray{0x88}
			ln.LineStyle.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
			p.Add(ln)
			lb, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: x, Y: ymax}}, Labels: []string{" " + ph.Name}})
			if err != nil {
				return err
			}
			p.Add(lb)
		}
		plots[i] = []*plot.Plot{p}
	}
	for _, lp := range lines {
		p := plot.New()
		p.Title.Text = lp.title
		p.X.Label.Text = "seconds since the scenario started"
		p.Y.Label.Text = "count"
		p.Legend.Top = true
		names := make([]string, 0, len(lp.series))
		for name := range lp.series {
			names = append(names, name)
		}
		sort.Strings(names)
		for j, name := range names {
			if len(lp.series[name]) == 0 {
				continue
			}
			ln, err := plotter.NewLine(lp.series[name])
			if err != nil {
				return err
			}
			ln.LineStyle.Color = palette[j%len(palette)]
			p.Add(ln)
			p.Legend.Add(name, ln)
		}
		plots = append(plots, []*plot.Plot{p})
	}
	img := vgsvg.New(vg.Points(900), vg.Points(float64(300*len(plots))))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Points(12), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = img.WriteTo(f)
	return err
}
