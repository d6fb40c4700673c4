// Package safetensors reads and writes the header of a safetensors file,
// the checkpoint format of Hugging Face's safetensors library
// (https://github.com/huggingface/safetensors, "Format" in its README):
//
//	[8 bytes: N, unsigned little-endian]
//	[N bytes: a JSON object, UTF-8, maybe padded with trailing spaces]
//	[the data: every tensor's bytes, row-major, little-endian]
//
// The JSON object maps each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]}, offsets in bytes relative to the start of
// the data, plus an optional "__metadata__" object of string to string.
//
// [Parse] validates everything a placement relies on before a single byte
// is placed: a header length within [MaxHeader] and within the file, a JSON
// object, known dtypes, non-negative shapes whose element count times the
// dtype's size equals the offsets' span (no overflow), ranges inside the
// data and not overlapping. A malformed header is an error wrapping
// [ErrMalformed] that says what is wrong. [Encode] builds a header for
// tensors laid out back to back.
//
// os2g stores the CRC-32C (Castagnoli) of each tensor's bytes in
// __metadata__ under "crc32c:<name>" (8 lowercase hex digits, see
// [CRCKey]), so a load can detect a flipped byte.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// MaxHeader is the largest JSON header accepted, in bytes (8 MiB: a
// header of tens of thousands of tensors; the safetensors library itself
// allows 100 MB).
const MaxHeader = 8 << 20

// ErrMalformed: the file is not a valid safetensors file; the wrapping
// error says why.
var ErrMalformed = errors.New("malformed safetensors file")

// MetadataKey is the reserved JSON key of the free-form metadata.
const MetadataKey = "__metadata__"

// dtypeSizes maps each dtype of the format to its element size in bytes.
var dtypeSizes = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// DTypeSize returns the element size in bytes of dtype ("F32", "BF16",
// ...), and false for an unknown dtype.
func DTypeSize(dtype string) (int64, bool) {
	n, ok := dtypeSizes[dtype]
	return n, ok
}

// Tensor is one entry of a header.
type Tensor struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	// Begin and End are the tensor's bytes [Begin, End) relative to the
	// start of the data (Header.DataStart).
	Begin int64 `json:"begin"`
	End   int64 `json:"end"`
}

// Size is the tensor's byte count.
func (t Tensor) Size() int64 { return t.End - t.Begin }

// Header is a parsed, validated header.
type Header struct {
	// Tensors in data order (by Begin, then name).
	Tensors []Tensor `json:"tensors"`
	// Metadata is __metadata__ (nil if absent).
	Metadata map[string]string `json:"metadata,omitempty"`
	// DataStart is the file offset of the data: 8 + the JSON length.
	DataStart int64 `json:"data_start"`
	// DataSize is the data's length in bytes: the end of the last tensor.
	DataSize int64 `json:"data_size"`
}

// CRCKey is the __metadata__ key under which os2g stores the CRC-32C of
// tensor name.
func CRCKey(name string) string { return "crc32c:" + name }

// CRC returns the CRC-32C recorded in h's metadata for tensor name, and
// false if none is (a file not written by os2g). ErrMalformed if the value
// is not 8 hex digits.
func (h *Header) CRC(name string) (uint32, bool, error) {
	v, ok := h.Metadata[CRCKey(name)]
	if !ok {
		return 0, false, nil
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("%w: %s is %q, not 8 hex digits", ErrMalformed, CRCKey(name), v)
	}
	c, err := strconv.ParseUint(v, 16, 32)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %s is %q, not 8 hex digits", ErrMalformed, CRCKey(name), v)
	}
	return uint32(c), true, nil
}

// HeaderLen decodes the 8-byte prefix of a file of fileSize bytes and
// returns the JSON header's length N, checked against MaxHeader and the
// file size. ErrMalformed otherwise.
func HeaderLen(prefix []byte, fileSize int64) (int64, error) {
	if len(prefix) < 8 || fileSize < 8 {
		return 0, fmt.Errorf("%w: %d bytes, shorter than the 8-byte length prefix", ErrMalformed, fileSize)
	}
	n := binary.LittleEndian.Uint64(prefix[:8])
	if n > MaxHeader {
		return 0, fmt.Errorf("%w: header length %d exceeds the %d-byte cap", ErrMalformed, n, MaxHeader)
	}
	if int64(n) > fileSize-8 {
		return 0, fmt.Errorf("%w: header length %d runs past the end of a %d-byte file", ErrMalformed, n, fileSize)
	}
	if n < 2 {
		return 0, fmt.Errorf("%w: header length %d cannot hold a JSON object", ErrMalformed, n)
	}
	return int64(n), nil
}

type rawEntry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// Parse validates the JSON header js (the N bytes after the length prefix)
// of a file of fileSize bytes and returns it. Errors wrap ErrMalformed.
func Parse(js []byte, fileSize int64) (*Header, error) {
	if int64(len(js)) > MaxHeader {
		return nil, fmt.Errorf("%w: header of %d bytes exceeds the %d-byte cap", ErrMalformed, len(js), MaxHeader)
	}
	dataStart := 8 + int64(len(js))
	if fileSize < dataStart {
		return nil, fmt.Errorf("%w: %d-byte file shorter than its %d-byte header", ErrMalformed, fileSize, dataStart)
	}
	dataLen := fileSize - dataStart
	trimmed := bytes.TrimRight(js, " ")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: header is not a JSON object", ErrMalformed)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: header JSON: %v", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: bytes after the header's JSON object", ErrMalformed)
	}
	h := &Header{DataStart: dataStart}
	for name, msg := range raw {
		if name == MetadataKey {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, fmt.Errorf("%w: %s is not an object of strings: %v", ErrMalformed, MetadataKey, err)
			}
			continue
		}
		t, err := parseEntry(name, msg, dataLen)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, t)
	}
	sort.Slice(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.Name < b.Name
	})
	for i := 1; i < len(h.Tensors); i++ {
		p, t := h.Tensors[i-1], h.Tensors[i]
		if t.Begin < p.End {
			return nil, fmt.Errorf("%w: tensors %q [%d,%d) and %q [%d,%d) overlap", ErrMalformed, p.Name, p.Begin, p.End, t.Name, t.Begin, t.End)
		}
	}
	if k := len(h.Tensors); k > 0 {
		h.DataSize = h.Tensors[k-1].End
	}
	for _, t := range h.Tensors {
		if _, _, err := h.CRC(t.Name); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func parseEntry(name string, msg json.RawMessage, dataLen int64) (Tensor, error) {
	var e rawEntry
	if err := json.Unmarshal(msg, &e); err != nil {
		return Tensor{}, fmt.Errorf("%w: tensor %q: %v", ErrMalformed, name, err)
	}
	if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
		return Tensor{}, fmt.Errorf("%w: tensor %q lacks dtype, shape or data_offsets", ErrMalformed, name)
	}
	if name == "" {
		return Tensor{}, fmt.Errorf("%w: a tensor has an empty name", ErrMalformed)
	}
	es, ok := dtypeSizes[*e.DType]
	if !ok {
		return Tensor{}, fmt.Errorf("%w: tensor %q has unknown dtype %q", ErrMalformed, name, *e.DType)
	}
	offs := *e.DataOffsets
	if len(offs) != 2 {
		return Tensor{}, fmt.Errorf("%w: tensor %q: data_offsets has %d values, want 2", ErrMalformed, name, len(offs))
	}
	b, end := offs[0], offs[1]
	if b < 0 || end < b || end > dataLen {
		return Tensor{}, fmt.Errorf("%w: tensor %q: data_offsets [%d,%d) outside the %d data bytes", ErrMalformed, name, b, end, dataLen)
	}
	n, err := byteCount(*e.Shape, es)
	if err != nil {
		return Tensor{}, fmt.Errorf("%w: tensor %q: %v", ErrMalformed, name, err)
	}
	if n != end-b {
		return Tensor{}, fmt.Errorf("%w: tensor %q: shape %v of %s is %d bytes, data_offsets span %d", ErrMalformed, name, *e.Shape, *e.DType, n, end-b)
	}
	return Tensor{Name: name, DType: *e.DType, Shape: *e.Shape, Begin: b, End: end}, nil
}

// byteCount is the product of shape times elem, an error on a negative
// dimension or an overflow of int64.
func byteCount(shape []int64, elem int64) (int64, error) {
	n := uint64(elem)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v overflows", shape)
		}
		n = lo
	}
	return int64(n), nil
}

// Spec describes a tensor to write: its name, dtype and shape.
type Spec struct {
	Name  string
	DType string
	Shape []int64
}

// Layout orders specs for writing (larger elements first, then by name,
// so every tensor starts aligned to its element size, as the safetensors
// library writes) and returns them with their offsets, plus the total data
// size. ErrMalformed for an unknown dtype, a bad shape, an empty, reserved
// or duplicate name.
func Layout(specs []Spec) ([]Tensor, int64, error) {
	seen := map[string]bool{}
	out := make([]Tensor, 0, len(specs))
	for _, s := range specs {
		if s.Name == "" || s.Name == MetadataKey {
			return nil, 0, fmt.Errorf("%w: tensor name %q is empty or reserved", ErrMalformed, s.Name)
		}
		if seen[s.Name] {
			return nil, 0, fmt.Errorf("%w: tensor name %q given twice", ErrMalformed, s.Name)
		}
		seen[s.Name] = true
		es, ok := dtypeSizes[s.DType]
		if !ok {
			return nil, 0, fmt.Errorf("%w: tensor %q has unknown dtype %q", ErrMalformed, s.Name, s.DType)
		}
		n, err := byteCount(s.Shape, es)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: tensor %q: %v", ErrMalformed, s.Name, err)
		}
		out = append(out, Tensor{Name: s.Name, DType: s.DType, Shape: append([]int64{}, s.Shape...), End: n})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := dtypeSizes[out[i].DType], dtypeSizes[out[j].DType]
		if a != b {
			return a > b
		}
		return out[i].Name < out[j].Name
	})
	var off int64
	for i := range out {
		n := out[i].End
		out[i].Begin, out[i].End = off, off+n
		off += n
	}
	return out, off, nil
}

// Encode returns the file prefix for tensors (from Layout) and metadata:
// the 8-byte length and the JSON header, padded with spaces so that the
// data starts at a multiple of 8 bytes. ErrMalformed if it would exceed
// MaxHeader.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	obj := make(map[string]any, len(tensors)+1)
	for _, t := range tensors {
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		obj[t.Name] = map[string]any{"dtype": t.DType, "shape": shape, "data_offsets": []int64{t.Begin, t.End}}
	}
	if len(metadata) > 0 {
		obj[MetadataKey] = metadata
	}
	js, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	if pad := (8 - len(js)%8) % 8; pad > 0 {
		js = append(js, strings.Repeat(" ", pad)...)
	}
	if len(js) > MaxHeader {
		return nil, fmt.Errorf("%w: header of %d bytes exceeds the %d-byte cap", ErrMalformed, len(js), MaxHeader)
	}
	out := make([]byte, 8+len(js))
	binary.LittleEndian.PutUint64(out, uint64(len(js)))
	copy(out[8:], js)
	return out, nil
}
