package gdd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/os2g/os2g/gdd/safetensors"
	"github.com/os2g/os2g/objclient"
)

// ServeOptions configures the placement service.
type ServeOptions struct {
	// Placer does the placements; its Device opens the destinations.
	// Required.
	Placer *Placer
	// Resolve turns a request's path into a Source (a path under the mount
	// mapped to a key, or a key itself). It should return an error wrapping
	// ErrNotFound, objclient.ErrNotFound or fs.ErrNotExist for a missing
	// file. Required.
	Resolve func(ctx context.Context, path string) (Source, error)
	// Create starts an upload of the object a save request's path names
	// (resolved like Resolve's paths); see Upload for the order of its
	// parts. Nil: the daemon refuses saves.
	Create func(ctx context.Context, path string) (Upload, error)
	// MaxInFlight bounds the requests served at once per connection
	// (default 16); a client may send more, they wait.
	MaxInFlight int
	// Logger receives one line per failed request at debug level and
	// connection errors at warn (nil: discarded).
	Logger *slog.Logger
}

// Listen creates a Unix socket at path with permissions perm (0 means 0600,
// owner only) and no window in which it is reachable with wider ones: it is
// bound under a temporary name, chmod'ed, then renamed into place. A stale
// socket at path is replaced. A missing parent directory is created (mode
// 0755, as for /run/os2g) before the bind. Closing the listener removes
// path.
func Listen(path string, perm os.FileMode) (net.Listener, error) {
	if perm == 0 {
		perm = 0o600
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("gdd: socket directory for %s: %w", path, err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp"+strconv.Itoa(os.Getpid()))
	_ = os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("gdd: listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, perm); err != nil {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("gdd: chmod %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("gdd: rename socket to %s: %w", path, err)
	}
	return &unixListener{UnixListener: ln, path: path}, nil
}

type unixListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

var _ net.Listener = (*unixListener)(nil)

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { _ = os.Remove(l.path) })
	return err
}

// Serve answers placement requests on ln until ctx is done, then closes ln,
// cancels the requests in progress, waits for them and returns nil. It
// returns an error if Accept fails for another reason.
func Serve(ctx context.Context, ln net.Listener, o ServeOptions) error {
	if o.Placer == nil || o.Resolve == nil {
		return fmt.Errorf("%w: ServeOptions needs Placer and Resolve", ErrInvalid)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 16
	}
	if o.MaxInFlight < 0 {
		return fmt.Errorf("%w: MaxInFlight %d", ErrInvalid, o.MaxInFlight)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{o: o, dev: o.Placer.Device(), handles: newHandleCache(o.Placer.Device())}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var err error
	for {
		c, aerr := ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("gdd: accept: %w", aerr)
				cancel()
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, c)
		}()
	}
	_ = ln.Close() // also when Accept failed; the AfterFunc may not have run yet
	wg.Wait()
	return err
}

type server struct {
	o       ServeOptions
	dev     Device
	handles *handleCache
}

// connState is one client connection.
type connState struct {
	c   net.Conn
	wmu sync.Mutex // guards writes to c (one reply frame at a time)
}

func (cs *connState) reply(r *Reply) error {
	r.V = WireVersion
	cs.wmu.Lock()
	defer cs.wmu.Unlock()
	return writeFrame(cs.c, r)
}

func (s *server) serveConn(ctx context.Context, c net.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	cs := &connState{c: c}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.o.MaxInFlight)
	defer func() {
		cancel()
		wg.Wait()
		stop()
		_ = c.Close()
		s.handles.dropConn(cs)
	}()
	for {
		body, err := readFrame(c)
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.o.Logger.Warn("gdd: connection dropped", "err", err)
			}
			return
		}
		var req Request
		if err := json.Unmarshal(body, &req); err != nil {
			_ = cs.reply(&Reply{Error: &WireError{Code: CodeBadRequest, Message: "request is not a JSON object: " + err.Error()}})
			continue
		}
		if req.V != WireVersion {
			_ = cs.reply(&Reply{ID: req.ID, Error: &WireError{Code: CodeBadVersion, Message: fmt.Sprintf("protocol version %d not supported (want %d)", req.V, WireVersion)}})
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := s.handle(ctx, cs, &req)
			r.ID = req.ID
			if err := cs.reply(r); err != nil {
				cancel()
			}
		}()
	}
}

// handle runs one request and builds its reply.
func (s *server) handle(ctx context.Context, cs *connState, req *Request) *Reply {
	switch req.Op {
	case OpInfo:
		return &Reply{Info: &Info{Kind: s.dev.Kind(), Device: s.dev.Ordinal(), BlockSize: s.o.Placer.BlockSize()}}
	case OpStat:
		src, err := s.resolve(ctx, req.Path)
		if err != nil {
			return errReply(err)
		}
		closeSource(src)
		return &Reply{Size: src.Size()}
	case OpPlace:
		res, err := s.place(ctx, cs, req)
		if err != nil {
			s.o.Logger.Debug("gdd: placement failed", "path", req.Path, "err", err)
			return errReply(err)
		}
		return &Reply{Bytes: res.Bytes, CRC32C: res.CRC32C}
	case OpHeader:
		h, err := s.header(ctx, req.Path)
		if err != nil {
			return errReply(err)
		}
		return &Reply{Header: h}
	case OpPlaceBatch:
		items, err := s.placeBatch(ctx, cs, req)
		if err != nil {
			s.o.Logger.Debug("gdd: batch placement failed", "path", req.Path, "err", err)
			return errReply(err)
		}
		var total int64
		for _, it := range items {
			total += it.Bytes
		}
		return &Reply{Bytes: total, Items: items}
	case OpSave:
		res, err := s.save(ctx, cs, req)
		if err != nil {
			s.o.Logger.Warn("gdd: save failed", "path", req.Path, "err", err)
			return errReply(err)
		}
		return &Reply{Bytes: res.Bytes, Size: res.Bytes}
	}
	return &Reply{Error: &WireError{Code: CodeBadRequest, Message: fmt.Sprintf("unknown op %q", req.Op)}}
}

func (s *server) resolve(ctx context.Context, path string) (Source, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty path", ErrInvalid)
	}
	return s.o.Resolve(ctx, path)
}

func closeSource(src Source) {
	if c, ok := src.(io.Closer); ok {
		_ = c.Close()
	}
}

func (s *server) place(ctx context.Context, cs *connState, req *Request) (Result, error) {
	d := req.Dst
	switch {
	case d == nil:
		return Result{}, fmt.Errorf("%w: place without dst", ErrInvalid)
	case d.Kind != s.dev.Kind():
		return Result{}, fmt.Errorf("%w: destination kind %q, this daemon places into %q", ErrInvalid, d.Kind, s.dev.Kind())
	case d.Device != s.dev.Ordinal():
		return Result{}, fmt.Errorf("%w: destination device %d, this daemon serves device %d", ErrInvalid, d.Device, s.dev.Ordinal())
	case d.Offset < 0 || d.Size < 0 || req.Offset < 0:
		return Result{}, fmt.Errorf("%w: negative offset or size", ErrInvalid)
	}
	src, err := s.resolve(ctx, req.Path)
	if err != nil {
		return Result{}, err
	}
	defer closeSource(src)
	n := int64(-1)
	if req.Length != nil {
		n = *req.Length
	}
	// Range errors come before the destination is opened.
	if size := src.Size(); req.Offset > size || (n >= 0 && n > size-req.Offset) {
		return Result{}, fmt.Errorf("%w: [%d,+%d) of a %d-byte file", ErrPastEOF, req.Offset, n, size)
	}
	buf, err := s.handles.acquire(cs, d.Kind, d.Handle)
	if err != nil {
		return Result{}, err
	}
	defer s.handles.release(d.Kind, d.Handle)
	if d.Offset > buf.Size() || d.Size > buf.Size()-d.Offset {
		return Result{}, fmt.Errorf("%w: destination [%d,+%d) outside its %d-byte allocation", ErrDstTooSmall, d.Offset, d.Size, buf.Size())
	}
	view, err := Slice(buf, d.Offset, d.Size)
	if err != nil {
		return Result{}, err
	}
	return s.o.Placer.Place(ctx, src, req.Offset, n, view)
}

// errReply maps an error to its wire code (the one place that does).
func errReply(err error) *Reply {
	code := CodeIO
	switch {
	case errors.Is(err, ErrBadHandle): // before not_found: it may wrap fs.ErrNotExist
		code = CodeBadHandle
	case errors.Is(err, ErrNotFound), errors.Is(err, objclient.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		code = CodeNotFound
	case errors.Is(err, ErrPastEOF):
		code = CodePastEOF
	case errors.Is(err, ErrDstTooSmall):
		code = CodeDstTooSmall
	case errors.Is(err, ErrDevice), errors.Is(err, ErrNoDevice):
		code = CodeDevice
	case errors.Is(err, safetensors.ErrMalformed):
		code = CodeMalformed
	case errors.Is(err, ErrChecksum):
		code = CodeChecksum
	case errors.Is(err, ErrInvalid):
		code = CodeBadRequest
	case errors.Is(err, objclient.ErrChanged):
		code = CodeChanged
	case errors.Is(err, context.Canceled), errors.Is(err, ErrClosed):
		code = CodeCanceled
	}
	return &Reply{Error: &WireError{Code: code, Message: err.Error()}}
}

// handleCache shares opened IPC destinations across requests and
// connections: the CUDA driver lets a process open a given handle once, and
// opening is costly. A mapping stays open while any connection that used it
// is open, and is closed when the last one goes.
type handleCache struct {
	dev Device

	mu      sync.Mutex // guards entries; held across OpenIPC so a handle is opened once
	entries map[string]*handleEntry
}

type handleEntry struct {
	buf   DeviceBuffer
	inUse int                     // requests using buf now
	conns map[*connState]struct{} // connections that used buf
}

func newHandleCache(dev Device) *handleCache {
	return &handleCache{dev: dev, entries: map[string]*handleEntry{}}
}

func handleKey(kind string, h []byte) string { return kind + "\x00" + string(h) }

func (hc *handleCache) acquire(cs *connState, kind string, h []byte) (DeviceBuffer, error) {
	key := handleKey(kind, h)
	hc.mu.Lock()
	defer hc.mu.Unlock()
	e, ok := hc.entries[key]
	if !ok {
		buf, err := hc.dev.OpenIPC(h)
		if err != nil {
			return nil, err
		}
		e = &handleEntry{buf: buf, conns: map[*connState]struct{}{}}
		hc.entries[key] = e
	}
	e.inUse++
	e.conns[cs] = struct{}{}
	return e.buf, nil
}

func (hc *handleCache) release(kind string, h []byte) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if e, ok := hc.entries[handleKey(kind, h)]; ok {
		e.inUse--
	}
}

// dropConn forgets cs (all its requests have finished) and closes the
// mappings no open connection uses any more.
func (hc *handleCache) dropConn(cs *connState) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	for k, e := range hc.entries {
		delete(e.conns, cs)
		if len(e.conns) == 0 && e.inUse == 0 {
			_ = e.buf.Close()
			delete(hc.entries, k)
		}
	}
}
