package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSocketPath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"unix:///csi/csi.sock", "/csi/csi.sock", true},
		{"unix:/csi/csi.sock", "/csi/csi.sock", true},
		{"/run/csi.sock", "/run/csi.sock", true},
		{"unix://relative.sock", "", false},
		{"tcp://127.0.0.1:10000", "", false},
		{"csi.sock", "", false},
	}
	for _, tc := range tests {
		got, err := socketPath(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("socketPath(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestFindOs2g(t *testing.T) {
	if got, err := findOs2g("/opt/os2g"); err != nil || got != "/opt/os2g" {
		t.Errorf("findOs2g(flag) = %q, %v", got, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "os2g")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	// The test binary's own directory has no os2g, so PATH decides.
	if got, err := findOs2g(""); err != nil || got != bin {
		t.Errorf("findOs2g from PATH = %q, %v; want %q", got, err, bin)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := findOs2g(""); err == nil {
		t.Error("findOs2g with no os2g anywhere succeeded")
	}
}
