// Package namespace maps object keys to a POSIX directory tree, knowing
// nothing of FUSE: key "a/b/c" is file c in directory a/b, a common
// prefix "a/" is directory a, and a key with a component that cannot be
// a POSIX name is skipped, never aliased.
//
// Here: name validation and the key<->name mapping (names.go); what a
// directory knows of a name (Entry), the turning of delimiter-listing
// pages into entries with directories shadowing files of the same name
// (Lister), the lookup probe of one name and the zero-byte
// directory-marker check (Probe, CheckMarker) in entry.go. The
// per-directory engine that uses them (listing and negative caches,
// background listings and lookup waits, walk detection, pending entries)
// is still in fusefs/dir.go and readdir.go, to move here next (issue 12).
package namespace

import "strings"

// MaxNameLen is Linux's NAME_MAX: the longest directory entry, in bytes.
const MaxNameLen = 255

// DirContentType marks a zero-byte object "name" (without a slash) as a
// directory, as Hadoop connectors and some consoles write them.
const DirContentType = "application/x-directory"

// ValidName reports whether s can be a POSIX directory entry: not empty,
// not "." or "..", at most MaxNameLen bytes, no "/" and no NUL. Keys with
// a component that fails this are not shown (the caller logs a warning);
// they are never aliased to another name.
func ValidName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > MaxNameLen {
		return false
	}
	return !strings.ContainsAny(s, "/\x00")
}

// IsDirContentType reports whether a Content-Type marks a directory
// (DirContentType, case-insensitive, parameters allowed).
func IsDirContentType(ct string) bool {
	ct, _, _ = strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(ct), DirContentType)
}

// ChildKey is the key of entry name in the directory whose key prefix is
// dirKey ("" or ending in "/").
func ChildKey(dirKey, name string) string { return dirKey + name }

// ChildDirKey is the key prefix ("dirKey" + name + "/") of subdirectory
// name of dirKey.
func ChildDirKey(dirKey, name string) string { return dirKey + name + "/" }

// CmpSlash compares h+"/" with k (like strings.Compare: -1, 0 or +1)
// without allocating. A listing uses it to tell whether a file "x" can
// still be shadowed by a directory "x/" that sorts after siblings such as
// "x.txt".
func CmpSlash(h, k string) int {
	n := len(h)
	if len(k) < n {
		if h[:len(k)] == k {
			return 1
		}
		if h[:len(k)] < k {
			return -1
		}
		return 1
	}
	if h != k[:n] {
		if h < k[:n] {
			return -1
		}
		return 1
	}
	if len(k) == n || k[n] < '/' {
		return 1
	}
	if k[n] == '/' && len(k) == n+1 {
		return 0
	}
	return -1
}
