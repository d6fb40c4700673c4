package main

import (
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		name          string
		in            []float64
		med, min, max float64
		n             int
	}{
		{"odd", []float64{3, 1, 2}, 2, 1, 3, 3},
		{"even", []float64{4, 1, 3, 2}, 2.5, 1, 4, 4},
		{"single", []float64{7}, 7, 7, 7, 1},
		{"nan ignored", []float64{5, nan, 1, math.Inf(1)}, 3, 1, 5, 2},
		{"duplicates", []float64{2, 2, 9}, 2, 2, 9, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := summarize(c.in)
			if s.Median != c.med || s.Min != c.min || s.Max != c.max || s.N != c.n {
				t.Fatalf("summarize(%v) = %+v, want med %v min %v max %v n %d", c.in, s, c.med, c.min, c.max, c.n)
			}
		})
	}
	s := summarize(nil)
	if !math.IsNaN(s.Median) || !math.IsNaN(s.Min) || !math.IsNaN(s.Max) || s.N != 0 {
		t.Fatalf("summarize(nil) = %+v, want NaNs", s)
	}
	in := []float64{3, 1, 2}
	summarize(in)
	if in[0] != 3 || in[1] != 1 {
		t.Fatalf("summarize modified its input: %v", in)
	}
}

func TestRatio(t *testing.T) {
	if r := ratio(3, 2); r != 1.5 {
		t.Fatalf("ratio(3,2) = %v", r)
	}
	for _, c := range [][2]float64{{0, 1}, {1, 0}, {math.NaN(), 1}, {1, math.Inf(1)}, {-1, 2}} {
		if r := ratio(c[0], c[1]); !math.IsNaN(r) {
			t.Fatalf("ratio(%v,%v) = %v, want NaN", c[0], c[1], r)
		}
	}
}
