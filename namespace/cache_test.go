package namespace

import (
	"slices"
	"testing"
)

func TestCache(t *testing.T) {
	always := func(int64) bool { return true }
	type state struct {
		names    []string // Names(nil)
		absent   []string
		complete int64
		gen      uint64
		listed   bool
	}
	tests := []struct {
		name string
		do   func(c *Cache)
		want state
	}{
		{"empty", func(c *Cache) {}, state{names: []string{}}},
		{"learned entries do not invalidate", func(c *Cache) {
			c.Learn("b", Entry{Seen: 5})
			c.Learn("a", Entry{Seen: 5})
		}, state{names: []string{"a", "b"}}},
		{"a complete listing drops what it did not see", func(c *Cache) {
			c.Learn("old", Entry{Seen: 1})
			c.Learn("a", Entry{Seen: 10})
			if !c.Complete(10, 0) {
				t.Error("Complete(10, 0) = false")
			}
		}, state{names: []string{"a"}, complete: 10, listed: true}},
		{"a mutation during the listing keeps it incomplete", func(c *Cache) {
			gen := c.Gen()
			c.Learn("a", Entry{Seen: 10})
			c.Note("b", Entry{Seen: 11})
			if c.Complete(10, gen) {
				t.Error("Complete after a mutation = true")
			}
		}, state{names: []string{"a", "b"}, gen: 1}},
		{"note invalidates a complete cache", func(c *Cache) {
			c.Complete(10, 0)
			c.Note("a", Entry{Seen: 11})
		}, state{names: []string{"a"}, gen: 1, listed: true}},
		{"gone: absent and invalid", func(c *Cache) {
			c.Learn("a", Entry{Seen: 1})
			c.Complete(1, 0)
			c.Gone("a", 2)
		}, state{names: []string{}, absent: []string{"a"}, gen: 1, listed: true}},
		{"absent then learned", func(c *Cache) {
			c.SetAbsent("a", 1)
			c.Learn("a", Entry{Seen: 2})
		}, state{names: []string{"a"}}},
		{"forget drops both", func(c *Cache) {
			c.Learn("a", Entry{Seen: 1})
			c.SetAbsent("b", 1)
			c.Forget("a")
			c.Forget("b")
		}, state{names: []string{}, gen: 2}},
		{"forget absent only", func(c *Cache) {
			c.Learn("a", Entry{Seen: 1})
			c.SetAbsent("b", 1)
			c.ForgetAbsent("b")
		}, state{names: []string{"a"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c Cache
			tc.do(&c)
			got := state{names: c.Names(nil), complete: c.CompleteAt(), gen: c.Gen(), listed: c.Listed()}
			for _, n := range []string{"a", "b", "old"} {
				if c.Absent(n, always) {
					got.absent = append(got.absent, n)
				}
			}
			if !slices.Equal(got.names, tc.want.names) || !slices.Equal(got.absent, tc.want.absent) ||
				got.complete != tc.want.complete || got.gen != tc.want.gen || got.listed != tc.want.listed {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if c.Len() != len(got.names) || c.AbsentLen() != len(got.absent) {
				t.Fatalf("Len %d, AbsentLen %d; want %d, %d", c.Len(), c.AbsentLen(), len(got.names), len(got.absent))
			}
		})
	}
}

func TestCacheNamesSubdirs(t *testing.T) {
	var c Cache
	c.Learn("z", Entry{Dir: true})
	c.Learn("f", Entry{Size: 1})
	c.Learn("d", Entry{Dir: true})
	c.Learn("p", Entry{})
	if got, want := c.Names(map[string]bool{"p": true}), []string{"d", "f", "z"}; !slices.Equal(got, want) {
		t.Fatalf("Names(skip p) = %q, want %q", got, want)
	}
	if got, want := c.Subdirs("d"), []string{"z"}; !slices.Equal(got, want) {
		t.Fatalf("Subdirs(d) = %q, want %q", got, want)
	}
	if e, ok := c.Entry("f"); !ok || e.Size != 1 {
		t.Fatalf("Entry(f) = %+v, %v", e, ok)
	}
	if _, ok := c.Entry("nope"); ok {
		t.Fatal("Entry(nope) found")
	}
}

func TestCacheLookup(t *testing.T) {
	const now, ttl = 1000, 100
	fresh := func(at int64) bool { return at != 0 && now-at < ttl }
	freshNeg := func(at int64) bool { return at != 0 && now-at < ttl/2 }
	tests := []struct {
		name  string
		setup func(c *Cache)
		look  string
		want  Known
	}{
		{"nothing known", func(c *Cache) {}, "a", Unknown},
		{"fresh entry", func(c *Cache) { c.Learn("a", Entry{Seen: now - 10, Size: 7}) }, "a", Present},
		{"stale entry", func(c *Cache) { c.Learn("a", Entry{Seen: now - ttl}) }, "a", Unknown},
		{"fresh complete listing lacks it", func(c *Cache) {
			c.Learn("b", Entry{Seen: now - 10})
			c.Complete(now-10, c.Gen())
		}, "a", Absent},
		{"stale complete listing", func(c *Cache) { c.Complete(now-ttl, c.Gen()) }, "a", Unknown},
		{"fresh negative", func(c *Cache) { c.SetAbsent("a", now-10) }, "a", Absent},
		{"stale negative", func(c *Cache) { c.SetAbsent("a", now-ttl/2) }, "a", Unknown},
		{"invalid name", func(c *Cache) {}, "..", Absent},
		{"name too long", func(c *Cache) {}, string(make([]byte, MaxNameLen+1)), Absent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c Cache
			tc.setup(&c)
			e, got := c.Lookup(tc.look, fresh, freshNeg)
			if got != tc.want {
				t.Fatalf("Lookup(%q) = %v, want %v", tc.look, got, tc.want)
			}
			if got == Present && e.Size != 7 {
				t.Fatalf("Lookup(%q) entry %+v, want Size 7", tc.look, e)
			}
		})
	}
}
