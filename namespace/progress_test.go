package namespace

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestProgressDecided(t *testing.T) {
	tests := []struct {
		name     string
		advances []string
		key      string
		want     bool
	}{
		{"nothing listed yet", nil, "a/", false},
		{"at the decided key", []string{"d/a/"}, "d/a/", true},
		{"before it", []string{"d/m/"}, "d/b/", true},
		{"after it", []string{"d/m/"}, "d/n/", false},
		{"a key never moves back", []string{"d/m/", "d/c/"}, "d/k/", true},
		{"file and directory of one name sort alike", []string{"d/a/"}, "d/a/", true},
		{"a longer name sorts after", []string{"d/a/"}, "d/ab/", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Progress
			p.Start(1, 0)
			for _, k := range tc.advances {
				p.Advance(k)
			}
			if got := p.Decided(tc.key); got != tc.want {
				t.Fatalf("after %q: Decided(%q) = %v, want %v", tc.advances, tc.key, got, tc.want)
			}
		})
	}
}

func TestProgressStartEnd(t *testing.T) {
	var p Progress
	if p.Running() {
		t.Fatal("zero Progress is running")
	}
	p.Advance("z/") // no listing: nothing moves
	if p.Decided("a/") {
		t.Fatal("Advance without a listing decided a key")
	}
	p.Start(42, 7)
	if !p.Running() || p.From() != 42 || p.Gen() != 7 || p.Seq() != 1 {
		t.Fatalf("after Start(42, 7): running %v, from %d, gen %d, seq %d", p.Running(), p.From(), p.Gen(), p.Seq())
	}
	p.Advance("m/")
	p.Hit()
	p.Miss()
	p.End()
	if p.Running() {
		t.Fatal("running after End")
	}
	p.End() // twice is harmless
	p.Start(50, 8)
	if p.Decided("a/") || p.Seq() != 2 || p.Hits() != 0 || p.Misses() != 0 {
		t.Fatalf("a new listing: decided a/ %v, seq %d, hits %d, misses %d; want false, 2, 0, 0", p.Decided("a/"), p.Seq(), p.Hits(), p.Misses())
	}
}

func TestProgressWorth(t *testing.T) {
	tests := []struct {
		hits, misses int
		want         bool
	}{
		{0, 0, true},
		{0, ListWaitMisses - 1, true},
		{0, ListWaitMisses, false},
		{ListWaitMisses, ListWaitMisses, false},
		{ListWaitMisses + 1, ListWaitMisses, true},
		{100, 20, true},
	}
	for _, tc := range tests {
		var p Progress
		p.Start(1, 0)
		for range tc.hits {
			p.Hit()
		}
		for range tc.misses {
			p.Miss()
		}
		if got := p.Worth(); got != tc.want {
			t.Errorf("%d hits, %d misses: Worth = %v, want %v", tc.hits, tc.misses, got, tc.want)
		}
	}
}

// TestProgressWait: a waiter wakes when the listing moves or ends, and
// gives up when its timer fires or its context ends; the lock is free
// while it waits.
func TestProgressWait(t *testing.T) {
	const long = time.Minute // never reached in a passing test
	tests := []struct {
		name  string
		wake  func(p *Progress, cancel context.CancelFunc) // with mu held
		timer time.Duration
		want  bool
	}{
		{"advance", func(p *Progress, _ context.CancelFunc) { p.Advance("k/") }, long, true},
		{"end", func(p *Progress, _ context.CancelFunc) { p.End() }, long, true},
		{"context ends", func(_ *Progress, cancel context.CancelFunc) { cancel() }, long, false},
		{"timer fires", nil, time.Millisecond, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var p Progress
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			mu.Lock()
			p.Start(1, 0)
			timer := time.NewTimer(tc.timer)
			defer timer.Stop()
			if tc.wake != nil {
				go func() {
					mu.Lock() // blocks until Wait releases it
					defer mu.Unlock()
					tc.wake(&p, cancel)
				}()
			}
			got := p.Wait(ctx, timer, &mu)
			mu.Unlock() // held again on return (Unlock of an unlocked mutex panics)
			if got != tc.want {
				t.Fatalf("Wait = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestProgressWaitNoListing(t *testing.T) {
	var mu sync.Mutex
	var p Progress
	mu.Lock()
	defer mu.Unlock()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	if !p.Wait(context.Background(), timer, &mu) {
		t.Fatal("Wait with no listing under way = false, want true at once")
	}
}
