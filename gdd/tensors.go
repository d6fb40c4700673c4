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

// saveUploads bounds the parts of one save in flight to the Upload at once;
// each holds a part-sized host buffer while it is sent.
const saveUploads = 4

// save writes req.Tensors as a safetensors object through s.o.Create,
// reading the device memory once: each byte crosses into host memory one
// time, through the Placer's pinned blocks (Drain). The header records
// every tensor's CRC32C yet precedes the data; since the CRCs are rendered
// as 8 hex digits, its length is known before they are, and the object's
// parts 2..N are uploaded while the data streams through, the parts that
// hold header bytes (part 1, or more with a header longer than a part)
// kept in host memory and sent last, once the CRCs are in. S3 takes a
// multipart upload's parts in any order ("Uploading and copying objects
// using multipart upload", Amazon S3 User Guide); an object of one part is
// one request (Upload.Put) after the pass. Host memory: the held parts
// plus saveUploads+1 part buffers. Any error aborts the upload: no object,
// and no partial one, is left.
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
	layout, dataSize, err := safetensors.Layout(specs)
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

	// The header with placeholder CRCs has the length of the final one.
	crcs := make([]uint32, len(layout))
	prefix, err := saveHeader(layout, req.Metadata, crcs)
	if err != nil {
		return Result{}, err
	}
	total := int64(len(prefix)) + dataSize

	u, err := s.o.Create(ctx, req.Path)
	if err != nil {
		return Result{}, err
	}
	finished := false
	defer func() {
		if !finished {
			_ = u.Abort(context.WithoutCancel(ctx))
		}
	}()
	psize := u.PartSize(total)
	if psize <= 0 {
		return Result{}, fmt.Errorf("%w: upload of %s: part size %d", ErrInvalid, req.Path, psize)
	}
	nparts := int((total + psize - 1) / psize)
	heldParts := max(1, int((int64(len(prefix))+psize-1)/psize))
	held := make([]byte, min(int64(heldParts)*psize, total))

	ps := newPartStream(ctx, u, psize, held, int64(len(prefix)), total)
	for i, t := range layout {
		c, err := s.o.Placer.Drain(ps.ctx, views[i], ps.write)
		if err != nil {
			if uerr := ps.wait(); uerr != nil {
				err = uerr
			}
			return Result{}, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		crcs[i] = c
	}
	if err := ps.wait(); err != nil {
		return Result{}, err
	}
	if ps.pos != total {
		return Result{}, fmt.Errorf("gdd: save of %s: %d of the object's %d bytes streamed", req.Path, ps.pos, total)
	}
	final, err := saveHeader(layout, req.Metadata, crcs)
	if err != nil {
		return Result{}, err
	}
	if len(final) != len(prefix) {
		return Result{}, fmt.Errorf("gdd: save of %s: header of %d bytes, %d with placeholders", req.Path, len(final), len(prefix))
	}
	copy(held, final)
	if nparts == 1 {
		finished = true // a failed Put cleans up itself
		if _, err := u.Put(ctx, held); err != nil {
			return Result{}, fmt.Errorf("upload of %s: %w", req.Path, err)
		}
		return Result{Bytes: total}, nil
	}
	for k := heldParts; k >= 1; k-- { // part 1 last
		part := held[int64(k-1)*psize : min(int64(k)*psize, int64(len(held)))]
		if err := u.WritePart(ctx, k, part); err != nil {
			return Result{}, fmt.Errorf("upload of %s: part %d: %w", req.Path, k, err)
		}
	}
	finished = true // a failed Complete cleans up itself
	if _, err := u.Complete(ctx, nparts, total); err != nil {
		return Result{}, fmt.Errorf("commit of %s: %w", req.Path, err)
	}
	return Result{Bytes: total}, nil
}

// saveHeader returns the file prefix of a save: layout, the caller's
// metadata and each tensor's CRC32C (crcs[i] for layout[i]) as 8 hex
// digits, a fixed width, so that the length does not depend on the values.
func saveHeader(layout []safetensors.Tensor, metadata map[string]string, crcs []uint32) ([]byte, error) {
	meta := make(map[string]string, len(metadata)+len(layout))
	for k, v := range metadata {
		meta[k] = v
	}
	for i, t := range layout {
		meta[safetensors.CRCKey(t.Name)] = fmt.Sprintf("%08x", crcs[i])
	}
	return safetensors.Encode(layout, meta)
}

// partStream cuts the bytes of a save's data, in object order from offset
// start, into parts of psize bytes: bytes before len(held) are copied into
// held (sent by the caller at the end), the others into part buffers sent
// to the Upload as each fills, at most saveUploads at once.
type partStream struct {
	ctx    context.Context // cancelled on the first failed part
	cancel context.CancelFunc
	u      Upload
	psize  int64 // bytes
	held   []byte
	total  int64 // object size, bytes

	// Used by the writing goroutine only.
	pos       int64  // object offset of the next byte
	cur       []byte // the part being filled, nil between parts
	curNum    int    // its number
	allocated int    // part buffers made so far
	free      chan []byte
	wg        sync.WaitGroup // parts in flight

	mu  sync.Mutex
	err error // GUARDED_BY(mu): the first failed part's error
}

func newPartStream(ctx context.Context, u Upload, psize int64, held []byte, start, total int64) *partStream {
	p := &partStream{u: u, psize: psize, held: held, total: total, pos: start, free: make(chan []byte, saveUploads+1)}
	p.ctx, p.cancel = context.WithCancel(ctx)
	return p
}

func (p *partStream) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// write takes the next bytes of the data (a Drain callback).
func (p *partStream) write(b []byte) error {
	for len(b) > 0 {
		if err := p.failed(); err != nil {
			return err
		}
		if p.pos < int64(len(p.held)) {
			n := copy(p.held[p.pos:], b)
			p.pos += int64(n)
			b = b[n:]
			continue
		}
		if p.pos >= p.total {
			return fmt.Errorf("gdd: save: data past the object's %d bytes", p.total)
		}
		if p.cur == nil {
			buf, err := p.buffer()
			if err != nil {
				return err
			}
			p.cur, p.curNum = buf[:0], int(p.pos/p.psize)+1
		}
		end := min(int64(p.curNum)*p.psize, p.total)
		n := min(end-p.pos, int64(len(b)))
		p.cur = append(p.cur, b[:n]...)
		p.pos += n
		b = b[n:]
		if p.pos == end {
			p.send()
		}
	}
	return nil
}

// buffer returns a free part buffer, making one while fewer than
// saveUploads+1 exist, else waiting for a part in flight to finish.
func (p *partStream) buffer() ([]byte, error) {
	select {
	case buf := <-p.free:
		return buf, nil
	default:
	}
	if p.allocated < saveUploads+1 {
		p.allocated++
		return make([]byte, p.psize), nil
	}
	select {
	case buf := <-p.free:
		return buf, nil
	case <-p.ctx.Done():
		if err := p.failed(); err != nil {
			return nil, err
		}
		return nil, p.ctx.Err()
	}
}

// send uploads the filled part in the background.
func (p *partStream) send() {
	num, buf := p.curNum, p.cur
	p.cur = nil
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.u.WritePart(p.ctx, num, buf); err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = fmt.Errorf("upload part %d: %w", num, err)
			}
			p.mu.Unlock()
			p.cancel()
		}
		p.free <- buf[:cap(buf)]
	}()
}

// wait waits for the parts in flight and returns the first part's error.
func (p *partStream) wait() error {
	p.wg.Wait()
	p.cancel()
	return p.failed()
}
