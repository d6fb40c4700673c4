package namespace

import (
	"maps"
	"testing"
)

func TestPending(t *testing.T) {
	type handle struct{ id int }
	a, b := &handle{1}, &handle{2}
	tests := []struct {
		name string
		do   func(p *Pending[*handle]) []bool // Remove results
		want map[string]*handle
		rm   []bool
	}{
		{"empty", func(p *Pending[*handle]) []bool { return nil }, map[string]*handle{}, nil},
		{"added", func(p *Pending[*handle]) []bool { p.Add("x", a); p.Add("y", b); return nil },
			map[string]*handle{"x": a, "y": b}, nil},
		{"removed by its own handle", func(p *Pending[*handle]) []bool {
			p.Add("x", a)
			return []bool{p.Remove("x", a)}
		}, map[string]*handle{}, []bool{true}},
		{"a later create of the name is kept", func(p *Pending[*handle]) []bool {
			p.Add("x", a)
			p.Add("x", b)
			return []bool{p.Remove("x", a)}
		}, map[string]*handle{"x": b}, []bool{false}},
		{"remove of an unknown name", func(p *Pending[*handle]) []bool {
			return []bool{p.Remove("x", a)}
		}, map[string]*handle{}, []bool{false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Pending[*handle]
			rm := tc.do(&p)
			got := map[string]*handle{}
			p.All(func(name string, n *handle) bool { got[name] = n; return true })
			if !maps.Equal(got, tc.want) || p.Len() != len(tc.want) {
				t.Fatalf("All = %v (Len %d), want %v", got, p.Len(), tc.want)
			}
			for name, n := range tc.want {
				if g, ok := p.Get(name); !ok || g != n {
					t.Fatalf("Get(%q) = %v, %v; want %v", name, g, ok, n)
				}
			}
			if _, ok := p.Get("nope"); ok {
				t.Fatal("Get(nope) found")
			}
			if len(rm) != len(tc.rm) || (len(rm) > 0 && rm[0] != tc.rm[0]) {
				t.Fatalf("Remove = %v, want %v", rm, tc.rm)
			}
		})
	}
}

func TestPendingAllStops(t *testing.T) {
	var p Pending[int]
	p.Add("a", 1)
	p.Add("b", 2)
	calls := 0
	p.All(func(string, int) bool { calls++; return false })
	if calls != 1 {
		t.Fatalf("All called yield %d times after it returned false, want 1", calls)
	}
}
