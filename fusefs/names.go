package fusefs

// Names and keys: see package namespace (ValidName, ChildKey, ...).

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
