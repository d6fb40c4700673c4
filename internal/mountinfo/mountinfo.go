// Package mountinfo reads the kernel's mount table, /proc/self/mountinfo
// (proc(5), "/proc/pid/mountinfo"): one line per mount,
//
//	ID PARENT MAJ:MIN ROOT TARGET OPTIONS [TAGS...] - FSTYPE SOURCE SUPEROPTIONS
//
// with " ", "\t", "\n" and "\\" in paths written as octal escapes
// (\040, \011, \012, \134). It is the one place os2g parses that table
// (the CLI's mount-point checks, stats and warm, and the bench harness).
package mountinfo

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// SelfPath is the mount table of the calling process.
const SelfPath = "/proc/self/mountinfo"

// Entry is one mount: Source and Target unescaped, FSType such as
// "fuse.os2g", Options the per-mount options ("rw,relatime"), Dev the
// file system's MAJ:MIN (for FUSE, MIN names the connection under
// /sys/fs/fuse/connections).
type Entry struct {
	Source, Target, FSType, Options, Dev string
}

// Parse reads a mount table in the format above. Lines that do not have
// it (too few fields, no "-" separator) are skipped; the error is the
// reader's. Lines up to 1 MiB long are read.
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 6 || sep < 0 || sep+2 >= len(f) {
			continue
		}
		out = append(out, Entry{Target: Unescape(f[4]), Options: f[5], FSType: f[sep+1], Source: Unescape(f[sep+2]), Dev: f[2]})
	}
	return out, sc.Err()
}

// Self returns the mounts of SelfPath; nil if it cannot be read (no
// procfs).
func Self() []Entry {
	f, err := os.Open(SelfPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	ms, _ := Parse(f)
	return ms
}

// At returns the last (topmost) mount of ms whose target is path
// (absolute, clean), if any.
func At(ms []Entry, path string) (Entry, bool) {
	var found Entry
	ok := false
	for _, m := range ms {
		if m.Target == path {
			found, ok = m, true
		}
	}
	return found, ok
}

// Enclosing returns the mount of ms that holds path (absolute, clean,
// symlinks resolved): the longest target that is path or a parent of it,
// the last (topmost) of equal ones.
func Enclosing(ms []Entry, path string) (Entry, bool) {
	var best Entry
	found := false
	for _, m := range ms {
		t := m.Target
		if t != path && t != "/" && !strings.HasPrefix(path, t+"/") {
			continue
		}
		if !found || len(t) >= len(best.Target) {
			best, found = m, true
		}
	}
	return best, found
}

// Under returns the targets of ms that are dir or below it, in table
// order.
func Under(ms []Entry, dir string) []string {
	var out []string
	for _, m := range ms {
		if m.Target == dir || strings.HasPrefix(m.Target, dir+"/") {
			out = append(out, m.Target)
		}
	}
	return out
}

// Unescape undoes the kernel's octal escaping (\NNN) of " \t\n\\" in
// mount tables; a backslash not followed by three octal digits stays.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
