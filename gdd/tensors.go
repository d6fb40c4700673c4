package gdd

import (
	"context"
	"fmt"
	"sync"

	"github.com/os2g/os2g/gdd/safetensors"
)

// ReadHeader reads and validates the safetensors header of src: the 8-byte
// length, then the JSON. Errors wrap safetensors.ErrMalformed for a bad
// file, or are src's read errors. The header bytes go through ordinary
// (not pinned) memory: they are metadata, not tensor data.
func ReadHeader(ctx context.Context, src Source) (*safetensors.Header, error) {
	size := src.Size()
	var prefix [8]byte
	if size < 8 {
		return nil, fmt.Errorf("%w: %d-byte file, shorter than the 8-byte length prefix", safetensors.ErrMalformed, size)
	}
	if err := readFull(ctx, src, prefix[:], 0); err != nil {
		return nil, err
	}
	n, err := safetensors.HeaderLen(prefix[:], size)
	if err != nil {
		return nil, err
	}
	js := make([]byte, n)
	if err := readFull(ctx, src, js, 8); err != nil {
		return nil, err
	}
	return safetensors.Parse(js, size)
}

func (s *server) header(ctx context.Context, path string) (*safetensors.Header, error) {
	src, err := s.resolve(ctx, path)
	if err != nil {
		return nil, err
	}
	defer closeSource(src)
	return ReadHeader(ctx, src)
}

// batchConcurrency bounds the placements of one place_batch run at once;
// they share the Placer's pool either way.
const batchConcurrency = 8

// placeBatch validates every item (and, for a safetensors file, the
// header and that each item is one tensor's bytes) and opens every
// destination before placing anything, then places the items
// concurrently. A checksum mismatch is reported after the placements
// finish, naming the item.
func (s *server) placeBatch(ctx context.Context, cs *connState, req *Request) ([]ItemResult, error) {
	if len(req.Items) == 0 {
		return nil, fmt.Errorf("%w: place_batch without items", ErrInvalid)
	}
	src, err := s.resolve(ctx, req.Path)
	if err != nil {
		return nil, err
	}
	defer closeSource(src)
	size := src.Size()
	names := make([]string, len(req.Items)) // tensor names (safetensors) for messages
	want := make([]*uint32, len(req.Items))
	var h *safetensors.Header
	if req.Safetensors {
		if h, err = ReadHeader(ctx, src); err != nil {
			return nil, err
		}
		byRange := map[[2]int64]safetensors.Tensor{}
		for _, t := range h.Tensors {
			byRange[[2]int64{h.DataStart + t.Begin, t.Size()}] = t
		}
		for i, it := range req.Items {
			t, ok := byRange[[2]int64{it.Offset, it.Length}]
			if !ok {
				return nil, fmt.Errorf("%w: item %d [%d,+%d) is not one tensor's bytes of %s", ErrInvalid, i, it.Offset, it.Length, req.Path)
			}
			names[i] = t.Name
			if c, ok, _ := h.CRC(t.Name); ok {
				want[i] = &c
			}
		}
	}
	for i, it := range req.Items {
		d := it.Dst
		switch {
		case d.Kind != s.dev.Kind():
			return nil, fmt.Errorf("%w: item %d: destination kind %q, this daemon places into %q", ErrInvalid, i, d.Kind, s.dev.Kind())
		case d.Device != s.dev.Ordinal():
			return nil, fmt.Errorf("%w: item %d: destination device %d, this daemon serves device %d", ErrInvalid, i, d.Device, s.dev.Ordinal())
		case it.Offset < 0 || it.Length < 0 || d.Offset < 0 || d.Size < 0:
			return nil, fmt.Errorf("%w: item %d: negative offset, length or size", ErrInvalid, i)
		case it.Offset > size || it.Length > size-it.Offset:
			return nil, fmt.Errorf("%w: item %d: [%d,+%d) of a %d-byte file", ErrPastEOF, i, it.Offset, it.Length, size)
		case it.Length > d.Size:
			return nil, fmt.Errorf("%w: item %d: %d bytes into a %d-byte destination", ErrDstTooSmall, i, it.Length, d.Size)
		}
		if it.CRC32C != nil {
			want[i] = it.CRC32C
		}
	}
	views := make([]DeviceBuffer, len(req.Items))
	var opened [][]byte
	defer func() {
		for _, hd := range opened {
			s.handles.release(s.dev.Kind(), hd)
		}
	}()
	for i, it := range req.Items {
		buf, err := s.handles.acquire(cs, it.Dst.Kind, it.Dst.Handle)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		opened = append(opened, it.Dst.Handle)
		if views[i], err = destView(buf, it.Dst); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
	}

	res := make([]ItemResult, len(req.Items))
	errs := make([]error, len(req.Items))
	sem := make(chan struct{}, batchConcurrency)
	var wg sync.WaitGroup
	for i, it := range req.Items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := s.o.Placer.Place(ctx, src, it.Offset, it.Length, views[i])
			res[i], errs[i] = ItemResult{Bytes: r.Bytes, CRC32C: r.CRC32C}, err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
	}
	for i, w := range want {
		if w != nil && res[i].CRC32C != *w {
			what := fmt.Sprintf("item %d [%d,+%d)", i, req.Items[i].Offset, req.Items[i].Length)
			if names[i] != "" {
				what = fmt.Sprintf("tensor %q", names[i])
			}
			return nil, fmt.Errorf("%w: %s of %s has CRC32C %08x, recorded %08x", ErrChecksum, what, req.Path, res[i].CRC32C, *w)
		}
	}
	return res, nil
}

// emptyBuffer is the source of a tensor without bytes (no allocation).
type emptyBuffer struct{}

func (emptyBuffer) Size() int64 { return 0 }
func (emptyBuffer) CopyToHost(p []byte, off int64) error {
	if len(p) != 0 || off != 0 {
		return fmt.Errorf("%w: read of an empty buffer", ErrInvalid)
	}
	return nil
}
func (emptyBuffer) Close() error { return nil }

// destView checks d against the opened allocation buf and returns the view
// [d.Offset, d.Offset+d.Size).
func destView(buf DeviceBuffer, d Dest) (DeviceBuffer, error) {
	if d.Offset > buf.Size() || d.Size > buf.Size()-d.Offset {
		return nil, fmt.Errorf("%w: destination [%d,+%d) outside its %d-byte allocation", ErrDstTooSmall, d.Offset, d.Size, buf.Size())
	}
	return Slice(buf, d.Offset, d.Size)
}

// save writes req.Tensors as a safetensors object through s.o.Create. The
// device memory is read twice: a first pass computes each tensor's CRC32C
// (the header, which records them, precedes the data), the second streams
// header and data into the upload, checking the CRCs again so that a
// tensor changed in between fails the save. Any error aborts the upload:
// no object, and no partial one, is left.
func (s *server) save(ctx context.Context, cs *connState, req *Request) (Result, error) {
	if s.o.Create == nil {
		return Result{}, fmt.Errorf("%w: this daemon does not save (no upload target configured)", ErrInvalid)
	}
	if req.Path == "" {
		return Result{}, fmt.Errorf("%w: empty path", ErrInvalid)
	}
	specs := make([]safetensors.Spec, len(req.Tensors))
	byName := map[string]*SaveTensor{}
	for i := range req.Tensors {
		t := &req.Tensors[i]
		specs[i] = safetensors.Spec{Name: t.Name, DType: t.DType, Shape: t.Shape}
		byName[t.Name] = t
	}
	layout, _, err := safetensors.Layout(specs)
	if err != nil {
		return Result{}, err
	}
	for k := range req.Metadata {
		if len(k) >= 7 && k[:7] == "crc32c:" {
			return Result{}, fmt.Errorf("%w: metadata key %q is reserved for the CRC32C the daemon records", ErrInvalid, k)
		}
	}
	views := make([]DeviceBuffer, len(layout))
	var opened [][]byte
	defer func() {
		for _, hd := range opened {
			s.handles.release(s.dev.Kind(), hd)
		}
	}()
	for i, t := range layout {
		st := byName[t.Name]
		d := st.Src
		switch {
		case d.Kind != s.dev.Kind():
			return Result{}, fmt.Errorf("%w: tensor %q: source kind %q, this daemon reads %q", ErrInvalid, t.Name, d.Kind, s.dev.Kind())
		case d.Device != s.dev.Ordinal():
			return Result{}, fmt.Errorf("%w: tensor %q: source device %d, this daemon serves device %d", ErrInvalid, t.Name, d.Device, s.dev.Ordinal())
		case d.Offset < 0 || d.Size != t.Size():
			return Result{}, fmt.Errorf("%w: tensor %q: source of %d bytes at %d, its shape %v of %s is %d bytes", ErrInvalid, t.Name, d.Size, d.Offset, t.Shape, t.DType, t.Size())
		}
		if t.Size() == 0 {
			views[i] = emptyBuffer{}
			continue
		}
		buf, err := s.handles.acquire(cs, d.Kind, d.Handle)
		if err != nil {
			return Result{}, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		opened = append(opened, d.Handle)
		if views[i], err = destView(buf, d); err != nil {
			return Result{}, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
	}

	// Pass 1: checksums.
	crcs := make([]uint32, len(layout))
	for i := range layout {
		c, err := s.o.Placer.Drain(ctx, views[i], nil)
		if err != nil {
			return Result{}, fmt.Errorf("tensor %q: %w", layout[i].Name, err)
		}
		crcs[i] = c
	}
	meta := make(map[string]string, len(req.Metadata)+len(layout))
	for k, v := range req.Metadata {
		meta[k] = v
	}
	for i, t := range layout {
		meta[safetensors.CRCKey(t.Name)] = fmt.Sprintf("%08x", crcs[i])
	}
	prefix, err := safetensors.Encode(layout, meta)
	if err != nil {
		return Result{}, err
	}

	// Pass 2: the upload.
	w, err := s.o.Create(ctx, req.Path)
	if err != nil {
		return Result{}, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = w.Abort(context.WithoutCancel(ctx))
		}
	}()
	if _, err := w.Write(prefix); err != nil {
		return Result{}, fmt.Errorf("upload of %s: %w", req.Path, err)
	}
	for i, t := range layout {
		c, err := s.o.Placer.Drain(ctx, views[i], func(b []byte) error {
			_, err := w.Write(b)
			return err
		})
		if err != nil {
			return Result{}, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if c != crcs[i] {
			return Result{}, fmt.Errorf("%w: tensor %q changed while it was saved (CRC32C %08x, then %08x)", ErrChecksum, t.Name, crcs[i], c)
		}
	}
	info, err := w.Commit(ctx)
	committed = true // a failed Commit has aborted the upload itself
	if err != nil {
		return Result{}, fmt.Errorf("commit of %s: %w", req.Path, err)
	}
	return Result{Bytes: info.Size}, nil
}
