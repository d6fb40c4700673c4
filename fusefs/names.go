package fusefs

import "strings"

// maxNameLen is Linux's NAME_MAX: the longest directory entry, in bytes.
const maxNameLen = 255

// dirContentType marks a zero-byte object "name" (without a slash) as a
// directory, as Hadoop connectors and some consoles write them.
const dirContentType = "application/x-directory"

// validName reports whether s can be a POSIX directory entry: not empty,
// not "." or "..", at most 255 bytes, no "/" and no NUL. Keys with a
// component that fails this are not shown (a warning is logged); they are
// never aliased to another name.
func validName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > maxNameLen {
		return false
	}
	return !strings.ContainsAny(s, "/\x00")
}

// isDirContentType reports whether a Content-Type marks a directory
// ("application/x-directory", parameters allowed).
func isDirContentType(ct string) bool {
	ct, _, _ = strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(ct), dirContentType)
}

// childKey is the key of entry name in the directory whose key prefix is
// dirKey ("" or ending in "/").
func childKey(dirKey, name string) string { return dirKey + name }

// childDirKey is the key prefix of subdirectory name of dirKey.
func childDirKey(dirKey, name string) string { return dirKey + name + "/" }

// direntIno is the inode number reported in READDIR entries: a hash of the
// key with the top bit clear, so it never collides with go-fuse's
// automatic inode numbers (which start at 2^63). stat(2) reports the
// node's own number; tools do not compare the two.
func direntIno(key string) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211 // FNV-1a
	v := uint64(offset64)
	for i := 0; i < len(key); i++ {
		v = (v ^ uint64(key[i])) * prime64
	}
	v &^= 1 << 63
	if v < 2 {
		v += 2
	}
	return v
}
