package main

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// cleanups is a registry of undo actions (unmount, stop server, remove
// directory) run last-in first-out, from defers on the normal path and from
// the signal handler on Ctrl-C, exactly once each.
type cleanups struct {
	log *slog.Logger
	mu  sync.Mutex // guards fns and next
	fns map[int]cleanupFn
	// next is the id of the next registered action (ids grow; LIFO = descending).
	next int
}

type cleanupFn struct {
	name string
	fn   func(ctx context.Context) error
}

func newCleanups(log *slog.Logger) *cleanups {
	return &cleanups{log: log, fns: map[int]cleanupFn{}}
}

// add registers fn and returns a function that runs it now (at most once)
// and removes it from the registry.
func (c *cleanups) add(name string, fn func(ctx context.Context) error) func() {
	c.mu.Lock()
	id := c.next
	c.next++
	c.fns[id] = cleanupFn{name, fn}
	c.mu.Unlock()
	return func() { c.runOne(id) }
}

func (c *cleanups) runOne(id int) {
	c.mu.Lock()
	f, ok := c.fns[id]
	delete(c.fns, id)
	c.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := f.fn(ctx); err != nil {
		c.log.Warn("cleanup failed", "step", f.name, "err", err)
	}
}

// runAll runs every registered action, newest first.
func (c *cleanups) runAll() {
	for {
		c.mu.Lock()
		id := -1
		for k := range c.fns {
			id = max(id, k)
		}
		c.mu.Unlock()
		if id < 0 {
			return
		}
		c.runOne(id)
	}
}

// lastLines returns the last n lines of s, trimmed, joined by " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
