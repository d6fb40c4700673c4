//go:build !race

package prefetch

// raceEnabled: the race detector's shadow memory inflates RSS.
const raceEnabled = false
