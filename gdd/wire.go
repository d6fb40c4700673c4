package gdd

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/os2g/os2g/gdd/safetensors"
)

// WireVersion is the version of the placement protocol (docs/gdd.md).
const WireVersion = 1

// MaxFrame is the largest message accepted, in bytes (16 MiB: a
// place_batch or save of tens of thousands of tensors, or the header reply
// of such a checkpoint; single placements are far smaller).
const MaxFrame = 16 << 20

// Request operations.
const (
	OpPlace = "place" // place bytes of a file into a destination
	OpStat  = "stat"  // report a file's size
	OpInfo  = "info"  // report the daemon's device
	// OpPlaceBatch places several ranges of one file (Items) in one request.
	OpPlaceBatch = "place_batch"
	// OpHeader returns the validated header of a safetensors file.
	OpHeader = "safetensors_header"
	// OpSave writes device tensors (Tensors) as a safetensors object at Path.
	OpSave = "save_safetensors"
)

// Error codes carried in replies (WireError.Code).
const (
	CodeBadRequest  = "bad_request"   // malformed or inconsistent request
	CodeBadVersion  = "bad_version"   // unsupported protocol version
	CodeNotFound    = "not_found"     // no such file
	CodePastEOF     = "past_eof"      // range past the end of the file
	CodeDstTooSmall = "dst_too_small" // destination cannot hold the bytes
	CodeBadHandle   = "bad_handle"    // the IPC handle could not be opened
	CodeDevice      = "device"        // device (CUDA) error, or no device
	CodeChanged     = "changed"       // the object changed during the read
	CodeCanceled    = "canceled"      // the request was cancelled (shutdown)
	CodeMalformed   = "malformed"     // the file is not a valid safetensors file
	CodeChecksum    = "checksum"      // the bytes placed do not match their recorded CRC32C
	CodeIO          = "io"            // any other error reading the file
)

// Request is one message from client to daemon.
type Request struct {
	V  int    `json:"v"`  // WireVersion
	ID uint64 `json:"id"` // chosen by the client; echoed in the reply
	Op string `json:"op"` // OpPlace, OpStat or OpInfo
	// Path names the file (a path under the mount or an object key; the
	// daemon's Resolve function decides). Place and stat.
	Path string `json:"path,omitempty"`
	// Offset is the first file byte to place.
	Offset int64 `json:"offset,omitempty"`
	// Length is the number of bytes to place; absent or negative means "to
	// the end of the file".
	Length *int64 `json:"length,omitempty"`
	// Dst is the destination (place only).
	Dst *Dest `json:"dst,omitempty"`
	// Items are the ranges of a place_batch.
	Items []BatchItem `json:"items,omitempty"`
	// Safetensors makes a place_batch validate Path as a safetensors file
	// first and accept only items that are exactly one tensor's bytes; each
	// tensor's CRC32C recorded in the header's metadata is then checked.
	Safetensors bool `json:"safetensors,omitempty"`
	// Tensors are the device tensors a save writes, in any order.
	Tensors []SaveTensor `json:"tensors,omitempty"`
	// Metadata is extra __metadata__ of a save (string to string).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// BatchItem is one range of a place_batch: bytes [Offset, Offset+Length) of
// the file into Dst. CRC32C, when set, is the expected checksum of those
// bytes; a mismatch fails the request with code "checksum".
type BatchItem struct {
	Offset int64   `json:"offset"`
	Length int64   `json:"length"`
	Dst    Dest    `json:"dst"`
	CRC32C *uint32 `json:"crc32c,omitempty"`
}

// ItemResult is the outcome of one BatchItem.
type ItemResult struct {
	Bytes  int64  `json:"bytes"`
	CRC32C uint32 `json:"crc32c"`
}

// SaveTensor is one tensor of a save: its safetensors dtype ("F32",
// "BF16", ...), shape, and the device memory holding its bytes (Src.Size
// must equal the element count times the dtype's size).
type SaveTensor struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Src   Dest    `json:"src"`
}

// Dest is a placement destination.
type Dest struct {
	// Kind is the device kind: "cuda" or "sim"; it must match the daemon's.
	Kind string `json:"kind"`
	// Handle is, for "cuda", the 64-byte cudaIpcMemHandle_t of the
	// allocation; for "sim" the name of a file in the daemon's shared-memory
	// directory. Base64 (standard alphabet, padded) in JSON.
	Handle []byte `json:"handle"`
	// Offset is the byte offset of the destination within the allocation.
	Offset int64 `json:"offset,omitempty"`
	// Size is the number of bytes the client owns from Offset (e.g. the
	// tensor's nbytes); the daemon never writes past Offset+Size even when
	// the allocation is larger. Required.
	Size int64 `json:"size"`
	// Device is the device ordinal as the daemon sees it.
	Device int `json:"device,omitempty"`
}

// Reply is one message from daemon to client.
type Reply struct {
	V  int    `json:"v"`
	ID uint64 `json:"id"`
	// Bytes and CRC32C describe the bytes placed (place).
	Bytes  int64  `json:"bytes"`
	CRC32C uint32 `json:"crc32c"`
	// Size is the file size in bytes (stat).
	Size int64 `json:"size,omitempty"`
	// Info describes the daemon's device (info).
	Info *Info `json:"info,omitempty"`
	// Items are the per-item results of a place_batch, in request order.
	Items []ItemResult `json:"items,omitempty"`
	// Header is the validated header (safetensors_header).
	Header *safetensors.Header `json:"header,omitempty"`
	// Error is nil on success.
	Error *WireError `json:"error,omitempty"`
}

// Info describes the daemon's placement device.
type Info struct {
	Kind      string `json:"kind"`       // "cuda" or "sim"
	Device    int    `json:"device"`     // ordinal
	BlockSize int    `json:"block_size"` // bytes
}

// WireError is an error reply. It is also the error Client returns for one;
// errors.Is matches it against the package sentinel for its code.
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *WireError) Error() string { return "gdd: " + e.Code + ": " + e.Message }

// Unwrap maps the code to its sentinel (nil for codes without one).
func (e *WireError) Unwrap() error {
	switch e.Code {
	case CodeNotFound:
		return ErrNotFound
	case CodePastEOF:
		return ErrPastEOF
	case CodeDstTooSmall:
		return ErrDstTooSmall
	case CodeBadHandle:
		return ErrBadHandle
	case CodeDevice:
		return ErrDevice
	case CodeBadRequest, CodeBadVersion:
		return ErrInvalid
	case CodeMalformed:
		return safetensors.ErrMalformed
	case CodeChecksum:
		return ErrChecksum
	}
	return nil
}

// writeFrame writes v as one length-prefixed JSON message.
func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(body) > MaxFrame {
		return fmt.Errorf("%w: message of %d bytes exceeds %d", ErrInvalid, len(body), MaxFrame)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

// errFrame reports a framing error: the stream cannot be resynchronised.
var errFrame = errors.New("gdd: bad frame")

// readFrame reads one message body; io.EOF at a clean boundary.
func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxFrame {
		return nil, fmt.Errorf("%w: length %d", errFrame, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}
