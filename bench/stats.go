package main

import (
	"math"
	"slices"
)

// summary is the median, minimum and maximum of a set of measurements.
// N counts the finite values; with N == 0 all three are NaN.
type summary struct {
	Median, Min, Max float64
	N                int
}

// summarize returns the median (mean of the two middle values for an even
// count), min and max of the finite values in xs. NaN and ±Inf are ignored.
func summarize(xs []float64) summary {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(v)
	n := len(v)
	med := v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return summary{Median: med, Min: v[0], Max: v[n-1], N: n}
}

// ratio returns a/b, NaN when either is not a positive finite number.
func ratio(a, b float64) float64 {
	if !(a > 0) || !(b > 0) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return math.NaN()
	}
	return a / b
}
