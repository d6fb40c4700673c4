package gdd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestListenCreatesDirectory: --gdd-socket /run/os2g/gdd.sock works when
// /run/os2g does not exist yet (README's example on a fresh machine).
func TestListenCreatesDirectory(t *testing.T) {
	base, err := os.MkdirTemp("", "gddl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	sock := filepath.Join(base, "run", "os2g", "gdd.sock")
	ln, err := Listen(sock, 0)
	if err != nil {
		t.Fatalf("Listen in a missing directory: %v", err)
	}
	st, err := os.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v; want a 0600 socket", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	c.Close()
	ln.Close()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
}
