package namespace

import (
	"fmt"
	"testing"
)

func TestNegative(t *testing.T) {
	const ttl = 100
	type op struct {
		kind string // "add", "forget", "absent"
		name string
		now  int64
		want bool // absent
	}
	tests := []struct {
		name string
		ops  []op
	}{
		{"empty knows nothing", []op{{"absent", "a", 1, false}}},
		{"added is absent", []op{{"add", "a", 1, false}, {"absent", "a", 50, true}, {"absent", "b", 50, false}}},
		{"until the TTL", []op{{"add", "a", 1, false}, {"absent", "a", 1 + ttl, false}}},
		{"added again renews", []op{{"add", "a", 1, false}, {"add", "a", 90, false}, {"absent", "a", 150, true}}},
		{"forgotten", []op{{"add", "a", 1, false}, {"forget", "a", 2, false}, {"absent", "a", 3, false}}},
		{"forget of unknown", []op{{"forget", "a", 1, false}, {"absent", "a", 2, false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n Negative
			for i, o := range tc.ops {
				switch o.kind {
				case "add":
					n.Add(o.name, o.now)
				case "forget":
					n.Forget(o.name)
				case "absent":
					fresh := func(at int64) bool { return o.now-at < ttl }
					if got := n.Absent(o.name, fresh); got != o.want {
						t.Fatalf("op %d: Absent(%q) at %d = %v, want %v", i, o.name, o.now, got, o.want)
					}
				}
			}
		})
	}
}

func TestNegativeBounded(t *testing.T) {
	var n Negative
	always := func(int64) bool { return true }
	for i := range MaxNegative {
		n.Add(fmt.Sprint(i), 1)
	}
	if n.Len() != MaxNegative {
		t.Fatalf("Len = %d, want %d", n.Len(), MaxNegative)
	}
	n.Add("last", 2)
	if n.Len() != 1 || !n.Absent("last", always) || n.Absent("0", always) {
		t.Fatalf("past MaxNegative: Len = %d, last absent %v, 0 absent %v; want 1, true, false",
			n.Len(), n.Absent("last", always), n.Absent("0", always))
	}
}
