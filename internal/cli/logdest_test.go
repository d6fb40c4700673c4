package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChooseLogDest: syslog when it answers; else a file named after the
// mount point under /var/log/os2g (root) or the user's state directory.
func TestChooseLogDest(t *testing.T) {
	state := t.TempDir()
	home := t.TempDir()
	yes := func() bool { return true }
	no := func() bool { return false }
	env := func(kv map[string]string) Env { return Env{Getenv: func(k string) string { return kv[k] }} }

	if d, err := chooseLogDest(env(nil), 1000, yes, "/mnt/data"); err != nil || !d.syslog || d.path != "" {
		t.Errorf("with syslog: %+v, %v", d, err)
	}
	d, err := chooseLogDest(env(map[string]string{"XDG_STATE_HOME": state, "HOME": home}), 1000, no, "/mnt/data")
	if want := filepath.Join(state, "os2g", "mnt-data.log"); err != nil || d.syslog || d.path != want {
		t.Errorf("XDG_STATE_HOME: %+v, %v; want %s", d, err, want)
	}
	if st, err := os.Stat(filepath.Join(state, "os2g")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("state directory: %v, %v", st, err)
	}
	d, err = chooseLogDest(env(map[string]string{"HOME": home, "XDG_STATE_HOME": "relative"}), 1000, no, "/home/u/my mnt")
	if want := filepath.Join(home, ".local", "state", "os2g", "home-u-my_mnt.log"); err != nil || d.path != want {
		t.Errorf("HOME: %+v, %v; want %s", d, err, want)
	}
	if _, err := chooseLogDest(env(nil), 1000, no, "/mnt"); err == nil || !strings.Contains(err.Error(), "--log-file") {
		t.Errorf("no HOME: %v, want an error naming --log-file", err)
	}
	if os.Geteuid() == 0 {
		d, err := chooseLogDest(env(map[string]string{"HOME": home}), 0, no, "/mnt/data")
		if err != nil || d.path != "/var/log/os2g/mnt-data.log" {
			t.Errorf("root: %+v, %v", d, err)
		}
	}
	for mp, want := range map[string]string{"/": "root.log", "/mnt/data/": "mnt-data.log", "/a/b.c_d-e": "a-b.c_d-e.log", "/x/ü": "x-__.log"} {
		if got := logFileName(mp); got != want {
			t.Errorf("logFileName(%q) = %q, want %q", mp, got, want)
		}
	}
}

// TestSyslogHandler: records reach a syslog socket with their severity
// (priority daemon.err = 27, daemon.warning = 28, daemon.info = 30), in
// the chosen format, without a time attribute.
func TestSyslogHandler(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "log.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h, c, err := newSyslogHandler("unixgram", sock, "json", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	log := slog.New(h).With("mountpoint", "/mnt/data")
	log.Error("upload failed", "key", "a/b")
	log.Warn("slow")
	log.Info("mounted")
	log.Debug("not sent")
	want := []struct {
		prio string
		msg  string
	}{{"<27>", "upload failed"}, {"<28>", "slow"}, {"<30>", "mounted"}}
	buf := make([]byte, 4096)
	for _, w := range want {
		ln.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("reading syslog datagram: %v", err)
		}
		line := string(buf[:n])
		if !strings.HasPrefix(line, w.prio) || !strings.Contains(line, "os2g") {
			t.Errorf("datagram %q, want priority %s and tag os2g", line, w.prio)
		}
		i := strings.Index(line, "{")
		var rec map[string]any
		if i < 0 || json.Unmarshal([]byte(strings.TrimSpace(line[i:])), &rec) != nil {
			t.Fatalf("datagram %q holds no JSON record", line)
		}
		if rec["msg"] != w.msg || rec["mountpoint"] != "/mnt/data" || rec["time"] != nil {
			t.Errorf("record %v, want msg %q, mountpoint, no time", rec, w.msg)
		}
	}
	ln.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := ln.Read(buf); err == nil {
		t.Errorf("a debug record was sent at level info: %q", buf[:n])
	}
}

// TestLogFileRotation: a log file rotates at --log-max-size and keeps the
// old file beside it; JSON format writes one JSON object per line.
func TestLogFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.log")
	m := mountFlags{logFile: path, logFormat: "json", logMaxSize: sizeFlag{v: 1 << 20}}
	log, c, err := m.newLogger(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 1000)
	for i := 0; i < 1500; i++ {
		log.Info("line", "i", i, "pad", pad)
	}
	c.Close()
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("after 1.5 MiB with a 1 MiB cap: files %v, want the log and one rotated file", ents)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 1<<20 {
		t.Errorf("live log is %d bytes, over the 1 MiB cap", len(b))
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	var rec map[string]any
	if err := json.Unmarshal(first, &rec); err != nil || rec["msg"] != "line" {
		t.Errorf("first line %q is not a JSON record: %v", first, err)
	}
}
