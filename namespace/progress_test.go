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

// TestProgressAwait: a lookup waiting for a background listing is
// answered by the page that passes its name, present or absent, and by
// the end of a complete listing; it gives up when the listing ends
// incomplete, the directory changes, or its wait runs out.
func TestProgressAwait(t *testing.T) {
	always := func(t int64) bool { return t != 0 }
	const long = time.Minute // never reached in a passing test
	tests := []struct {
		name    string
		wait    time.Duration
		key     string                      // ChildKey("d/", name)+"/"
		step    func(p *Progress, c *Cache) // under mu, after the waiter blocked
		found   bool
		decided bool
		hits    int
		misses  int
	}{
		{"a page passes the name, present", long, "d/b/", func(p *Progress, c *Cache) {
			c.Learn("b", Entry{Seen: 10})
			p.Advance("d/c/")
		}, true, true, 1, 0},
		{"a page passes the name, absent", long, "d/b/", func(p *Progress, c *Cache) {
			c.Learn("c", Entry{Seen: 10})
			p.Advance("d/c/")
		}, false, true, 1, 0},
		{"an entry older than the listing is not confirmed", long, "d/b/", func(p *Progress, c *Cache) {
			c.Learn("b", Entry{Seen: 9})
			p.Advance("d/c/")
		}, false, true, 1, 0},
		{"the listing completes", long, "d/b/", func(p *Progress, c *Cache) {
			c.Learn("b", Entry{Seen: 10})
			c.Complete(10, p.Gen())
			p.End()
		}, true, true, 0, 0},
		{"the listing ends incomplete", long, "d/b/", func(p *Progress, c *Cache) { p.End() }, false, false, 0, 0},
		{"the directory changes", long, "d/b/", func(p *Progress, c *Cache) {
			c.Note("x", Entry{Seen: 11})
			p.Advance("d/a/")
		}, false, false, 0, 0},
		{"the wait runs out", time.Millisecond, "d/b/", nil, false, false, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var p Progress
			var c Cache
			mu.Lock()
			p.Start(10, c.Gen())
			if tc.step != nil {
				go func() {
					mu.Lock() // blocks until Await waits
					defer mu.Unlock()
					tc.step(&p, &c)
				}()
			}
			_, found, decided := p.Await(context.Background(), &mu, &c, "b", tc.key, tc.wait, always)
			hits, misses := p.Hits(), p.Misses()
			mu.Unlock()
			if found != tc.found || decided != tc.decided || hits != tc.hits || misses != tc.misses {
				t.Fatalf("Await = found %v, decided %v (hits %d, misses %d); want %v, %v (%d, %d)",
					found, decided, hits, misses, tc.found, tc.decided, tc.hits, tc.misses)
			}
		})
	}
}

func TestProgressAwaitNotWorth(t *testing.T) {
	var mu sync.Mutex
	var p Progress
	var c Cache
	p.Start(1, 0)
	p.Advance("z/") // would decide the name at once
	for range ListWaitMisses {
		p.Miss()
	}
	mu.Lock()
	defer mu.Unlock()
	if _, _, decided := p.Await(context.Background(), &mu, &c, "b", "d/b/", time.Minute, func(int64) bool { return true }); decided {
		t.Fatal("Await decided for a listing no longer worth waiting for")
	}
}

// TestProgressAwaitEnd: a readdir waits through the pages of the listing
// under way to its end, but not for a later listing, and not past its
// wait.
func TestProgressAwaitEnd(t *testing.T) {
	const long = time.Minute // never reached in a passing test
	tests := []struct {
		name    string
		wait    time.Duration
		step    func(p *Progress) // under mu, after the waiter blocked; returns when done
		running bool              // after AwaitEnd returns
	}{
		{"pages then the end", long, func(p *Progress) {
			p.Advance("a/")
			p.Advance("b/")
			p.End()
		}, false},
		{"a later listing is not waited for", long, func(p *Progress) {
			p.End()
			p.Start(20, 0)
		}, true},
		{"the wait runs out", time.Millisecond, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var p Progress
			mu.Lock()
			p.Start(10, 0)
			if tc.step != nil {
				go func() {
					mu.Lock()
					defer mu.Unlock()
					tc.step(&p)
				}()
			}
			p.AwaitEnd(context.Background(), &mu, tc.wait)
			running := p.Running()
			mu.Unlock()
			if running != tc.running {
				t.Fatalf("after AwaitEnd: running %v, want %v", running, tc.running)
			}
		})
	}
	var mu sync.Mutex
	var p Progress
	mu.Lock()
	p.AwaitEnd(context.Background(), &mu, long) // none under way: at once
	mu.Unlock()
}
