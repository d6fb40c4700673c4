package namespace

import (
	"slices"
	"testing"
	"time"
)

func TestColdMisses(t *testing.T) {
	const ttl = int64(time.Minute)
	sec := int64(time.Second)
	type step struct {
		now  int64
		fail bool // call Failed(now) instead of Note
		want bool
	}
	notes := func(from int64, n int) []step {
		var s []step
		for i := range n {
			s = append(s, step{now: from + int64(i)*sec, want: i == n-1 && n == ColdListMisses})
		}
		return s
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"the 8th miss starts a listing", notes(1, ColdListMisses)},
		{"fewer do not", notes(1, ColdListMisses-1)},
		{"a count past the TTL starts over", append(notes(1, ColdListMisses-1),
			step{now: 1 + ttl + sec, want: false})},
		{"after a failure none for the backoff", append([]step{{now: 1, fail: true}}, notes(2, ColdListMisses)[:ColdListMisses-1]...)},
		{"after the backoff again", append([]step{{now: 1, fail: true}},
			notes(2+int64(ColdListBackoff), ColdListMisses)...)},
	}
	tests[3].steps = append(tests[3].steps, step{now: 2 + int64(ColdListMisses)*sec, want: false})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c ColdMisses
			for i, s := range tc.steps {
				if s.fail {
					c.Failed(s.now)
					continue
				}
				fresh := func(at int64) bool { return at != 0 && s.now-at < ttl }
				if got := c.Note(s.now, fresh); got != s.want {
					t.Fatalf("step %d (now %d): Note = %v, want %v", i, s.now, got, s.want)
				}
			}
		})
	}
}

func TestColdMissesReset(t *testing.T) {
	var c ColdMisses
	fresh := func(at int64) bool { return at != 0 }
	for i := range ColdListMisses - 1 {
		c.Note(int64(i+1), fresh)
	}
	c.Reset()
	if c.Note(100, fresh) {
		t.Fatal("the first miss after Reset started a listing")
	}
	c.Failed(200)
	if c.FailedAt() != 200 {
		t.Fatalf("FailedAt = %d, want 200", c.FailedAt())
	}
}

func TestWalk(t *testing.T) {
	sec := int64(time.Second)
	win := int64(WalkWindow)
	type step struct {
		now      int64
		complete bool
		want     bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"second listing within the window", []step{{1, true, false}, {1 + sec, true, true}}},
		{"fires once", []step{{1, true, false}, {2, true, true}, {3, true, false}, {4, true, false}}},
		{"too far apart", []step{{1, true, false}, {2 + win, true, false}}},
		{"the window moves with each listing", []step{{1, true, false}, {2 + win, true, false}, {3 + win, true, true}}},
		{"not while the parent is incompletely listed", []step{{1, false, false}, {2, false, false}, {3, true, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w Walk
			for i, s := range tc.steps {
				if got := w.Note(s.now, s.complete); got != s.want {
					t.Fatalf("step %d: Note(%d, %v) = %v, want %v", i, s.now, s.complete, got, s.want)
				}
			}
			fired := slices.ContainsFunc(tc.steps, func(s step) bool { return s.want })
			if w.Done() != fired {
				t.Fatalf("Done = %v, want %v", w.Done(), fired)
			}
		})
	}
}

func TestWalkTargets(t *testing.T) {
	ents := map[string]Entry{
		"c":     {Dir: true},
		"a":     {Dir: true},
		"self":  {Dir: true},
		"f.txt": {Size: 3},
		"b":     {Dir: true, XDir: true},
	}
	if got, want := WalkTargets(ents, "self"), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("WalkTargets = %q, want %q", got, want)
	}
	if got := WalkTargets(map[string]Entry{"f": {}}, ""); got != nil {
		t.Fatalf("no subdirectories: WalkTargets = %q, want nil", got)
	}
}
