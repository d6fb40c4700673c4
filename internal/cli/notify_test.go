package cli

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSdNotify: the state reaches a fake NOTIFY_SOCKET, path or abstract;
// no socket is a no-op; a bad value is an error.
func TestSdNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	abstract := "@os2g-test-" + filepath.Base(t.TempDir())
	for _, sock := range []string{path, abstract} {
		name := sock
		if sock[0] == '@' {
			name = "\x00" + sock[1:]
		}
		ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		if err := sdNotify(sock, "READY=1\nSTATUS=up"); err != nil {
			t.Fatalf("sdNotify(%q): %v", sock, err)
		}
		ln.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 256)
		n, err := ln.Read(buf)
		ln.Close()
		if err != nil || string(buf[:n]) != "READY=1\nSTATUS=up" {
			t.Errorf("%s received %q, %v", sock, buf[:n], err)
		}
	}
	if err := sdNotify("", "READY=1"); err != nil {
		t.Errorf("no socket: %v", err)
	}
	if err := sdNotify("relative.sock", "READY=1"); err == nil || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
		t.Errorf("relative socket: %v", err)
	}
	if err := sdNotify(filepath.Join(t.TempDir(), "none.sock"), "READY=1"); err == nil {
		t.Error("a socket nobody listens on: no error")
	}
}
