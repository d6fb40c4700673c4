package diskcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// castagnoli is the CRC32C table (read-only after initialisation).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	sidecarMagic  = "os2gdc1\n"
	sidecarSuffix = ".meta"
	tmpDirName    = "tmp"
	lockName      = "lock"
	// maxSidecar bounds what New reads of a sidecar: S3 keys are at most
	// 1024 bytes and ETags short, so anything larger is corrupt.
	maxSidecar = 8 << 10
)

// entryID is the hex SHA-256 of key + "\x00" + etag.
func entryID(key, etag string) string {
	h := sha256.New()
	io.WriteString(h, key)
	h.Write([]byte{0})
	io.WriteString(h, etag)
	return hex.EncodeToString(h.Sum(nil))
}

// isEntryID reports whether s looks like an entryID (64 lower-case hex digits).
func isEntryID(s string) bool { return len(s) == 2*sha256.Size && isHex(s) }

// isHex reports whether s is made of lower-case hex digits only.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// contentPath and sidecarPath name an entry's files under dir.
func contentPath(dir, id string) string { return filepath.Join(dir, id[:2], id) }
func sidecarPath(dir, id string) string { return contentPath(dir, id) + sidecarSuffix }

// meta is what a sidecar holds.
type meta struct {
	key, etag string
	size      int64  // bytes of content
	crc       uint32 // CRC32C (Castagnoli) of the content
}

// encode returns the sidecar bytes of m (see the package doc).
func (m meta) encode() []byte {
	b := make([]byte, 0, len(sidecarMagic)+4+len(m.key)+4+len(m.etag)+8+4+4)
	b = append(b, sidecarMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.key)))
	b = append(b, m.key...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.etag)))
	b = append(b, m.etag...)
	b = binary.BigEndian.AppendUint64(b, uint64(m.size))
	b = binary.BigEndian.AppendUint32(b, m.crc)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errBadSidecar = errors.New("diskcache: malformed sidecar")

// decodeMeta parses sidecar bytes.
func decodeMeta(b []byte) (meta, error) {
	if len(b) < len(sidecarMagic)+4+4+8+4+4 || string(b[:len(sidecarMagic)]) != sidecarMagic {
		return meta{}, errBadSidecar
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return meta{}, errBadSidecar
	}
	r := body[len(sidecarMagic):]
	str := func() (string, bool) {
		if len(r) < 4 {
			return "", false
		}
		n := binary.BigEndian.Uint32(r)
		r = r[4:]
		if uint64(len(r)) < uint64(n) {
			return "", false
		}
		s := string(r[:n])
		r = r[n:]
		return s, true
	}
	var m meta
	var ok bool
	if m.key, ok = str(); !ok {
		return meta{}, errBadSidecar
	}
	if m.etag, ok = str(); !ok {
		return meta{}, errBadSidecar
	}
	if len(r) != 8+4 {
		return meta{}, errBadSidecar
	}
	m.size = int64(binary.BigEndian.Uint64(r))
	m.crc = binary.BigEndian.Uint32(r[8:])
	if m.size < 0 {
		return meta{}, errBadSidecar
	}
	return m, nil
}

// readSidecar reads and parses the sidecar at path.
func readSidecar(path string) (meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return meta{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSidecar+1))
	if err != nil {
		return meta{}, err
	}
	if len(b) > maxSidecar {
		return meta{}, errBadSidecar
	}
	return decodeMeta(b)
}

// checksumFile returns the size and CRC32C of the file at path.
func checksumFile(path string) (int64, uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.CopyBuffer(h, f, make([]byte, 256<<10))
	if err != nil {
		return n, 0, fmt.Errorf("diskcache: reading %s: %w", path, err)
	}
	return n, h.Sum32(), nil
}
