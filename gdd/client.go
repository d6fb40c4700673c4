package gdd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
)

// Client speaks the placement protocol to a daemon over a Unix socket. Many
// requests may be in flight at once (one goroutine per call). Errors that
// the daemon reports are *WireError, which errors.Is matches against
// ErrNotFound, ErrPastEOF, ErrDstTooSmall, ErrBadHandle, ErrDevice.
type Client struct {
	c net.Conn

	wmu sync.Mutex // guards writes to c

	mu      sync.Mutex // guards nextID, pending, err
	nextID  uint64
	pending map[uint64]chan *Reply
	err     error // set when the connection failed; then every call fails
	done    chan struct{}
}

// Dial connects to the daemon's socket.
func Dial(ctx context.Context, socket string) (*Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("gdd: dial %s: %w", socket, err)
	}
	cl := &Client{c: c, pending: map[uint64]chan *Reply{}, done: make(chan struct{})}
	go cl.readLoop()
	return cl, nil
}

func (cl *Client) readLoop() {
	defer close(cl.done)
	for {
		body, err := readFrame(cl.c)
		if err == nil {
			var r Reply
			if err = json.Unmarshal(body, &r); err == nil {
				cl.mu.Lock()
				ch := cl.pending[r.ID]
				delete(cl.pending, r.ID)
				cl.mu.Unlock()
				if ch != nil {
					ch <- &r
				}
				continue
			}
		}
		cl.mu.Lock()
		cl.err = fmt.Errorf("gdd: connection lost: %w", err)
		for id, ch := range cl.pending {
			close(ch)
			delete(cl.pending, id)
		}
		cl.mu.Unlock()
		return
	}
}

// Do sends req (its V and ID are filled in) and waits for the reply. A
// reply carrying an error is returned as is, with a nil error; Place, Stat
// and Info turn it into a *WireError.
func (cl *Client) Do(ctx context.Context, req Request) (*Reply, error) {
	ch := make(chan *Reply, 1)
	cl.mu.Lock()
	if cl.err != nil {
		err := cl.err
		cl.mu.Unlock()
		return nil, err
	}
	cl.nextID++
	req.ID = cl.nextID
	req.V = WireVersion
	cl.pending[req.ID] = ch
	cl.mu.Unlock()

	cl.wmu.Lock()
	err := writeFrame(cl.c, &req)
	cl.wmu.Unlock()
	if err != nil {
		cl.forget(req.ID)
		return nil, fmt.Errorf("gdd: send: %w", err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			cl.mu.Lock()
			defer cl.mu.Unlock()
			return nil, cl.err
		}
		return r, nil
	case <-ctx.Done():
		// The daemon still finishes the request; its reply is dropped.
		cl.forget(req.ID)
		return nil, ctx.Err()
	}
}

func (cl *Client) forget(id uint64) {
	cl.mu.Lock()
	delete(cl.pending, id)
	cl.mu.Unlock()
}

// Place asks for bytes [off, off+n) of path (n < 0: to the end) to be
// placed into dst.
func (cl *Client) Place(ctx context.Context, path string, off, n int64, dst Dest) (Result, error) {
	r, err := cl.Do(ctx, Request{Op: OpPlace, Path: path, Offset: off, Length: &n, Dst: &dst})
	if err != nil {
		return Result{}, err
	}
	if r.Error != nil {
		return Result{}, r.Error
	}
	return Result{Bytes: r.Bytes, CRC32C: r.CRC32C}, nil
}

// Stat returns the size of path in bytes.
func (cl *Client) Stat(ctx context.Context, path string) (int64, error) {
	r, err := cl.Do(ctx, Request{Op: OpStat, Path: path})
	if err != nil {
		return 0, err
	}
	if r.Error != nil {
		return 0, r.Error
	}
	return r.Size, nil
}

// Info describes the daemon's device.
func (cl *Client) Info(ctx context.Context) (Info, error) {
	r, err := cl.Do(ctx, Request{Op: OpInfo})
	if err != nil {
		return Info{}, err
	}
	if r.Error != nil {
		return Info{}, r.Error
	}
	if r.Info == nil {
		return Info{}, fmt.Errorf("%w: info reply without info", ErrInvalid)
	}
	return *r.Info, nil
}

// Close closes the connection; the daemon then closes the IPC mappings only
// this connection used.
func (cl *Client) Close() error {
	err := cl.c.Close()
	<-cl.done
	return err
}
