package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestCharts(t *testing.T) {
	figs := aggregate(testSamples(), []string{"os2g", "s3fs", "limit"})
	dir := t.TempDir()
	for name, fn := range map[string]func([]figure, string) error{"throughput.png": throughputChart, "cpu.png": cpuChart} {
		p := filepath.Join(dir, name)
		if err := fn(figs, p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s is not a PNG: %v", name, err)
		}
		// Two panels (seq-1j, list) in one row of three: 900×220 points at 96 dpi.
		if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w != 1200 || h != 293 {
			t.Fatalf("%s is %dx%d, want 1200x293", name, w, h)
		}
	}
	if err := throughputChart(nil, filepath.Join(dir, "x.png")); err == nil {
		t.Fatal("chart without figures")
	}
}
