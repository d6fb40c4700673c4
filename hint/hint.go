// Package hint is the exact-order hint of issue 15: a training script that
// knows the order in which its sampler will read files in the coming
// epoch (PyTorch's DistributedSampler or a seeded RandomSampler) hands the
// daemon that order, and the daemon pre-reads exactly those files, in
// order, a bounded window ahead of the reader (prefetch.Manager.Hint).
//
// The hand-over is an HTTP request on the daemon's control socket (the
// Unix socket "os2g stats" reads, /run/os2g/HASH.sock), never the data
// path:
//
//	POST /hint
//	Content-Type: application/json
//
//	{"files": ["cls_a/img_0001.png", "/mnt/data/cls_b/img_0042.png", ...], "epoch": 3, "stream": "rank0"}
//
// "stream" names the reader (optional): several ranks of one node that
// share a mount each send their own order under their own stream, and each
// hint replaces only its stream's previous one.
// Each path is relative to the mount point or absolute under it (not
// resolving symbolic links: the mount has none). The reply is JSON: 200
// with {"files": N, "unknown": U, "duplicates": D} (files that will be
// pre-read, paths skipped because their directory was not listed yet,
// paths named twice); 400 with {"error": "..."} for a malformed request
// or a path outside the mount (nothing is hinted then); 422 when no path
// names a listed file. An empty "files" list drops the current hint.
// python/os2g/epoch.py is the client.
package hint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"

	"github.com/os2g/os2g/prefetch"
)

// Errors of Decode and Keys (wrapped with %w).
var (
	// ErrOutside: a path is not under the mount point.
	ErrOutside = errors.New("hint: path outside the mount")
	// ErrBadPath: a path is empty, names the mount point itself, or holds
	// a NUL byte.
	ErrBadPath = errors.New("hint: bad path")
	// ErrBadRequest: the body is not a JSON hint, or is too large.
	ErrBadRequest = errors.New("hint: bad request")
)

// MaxBodyBytes bounds a request body (64 MiB: about a million paths of 60
// bytes).
const MaxBodyBytes = 64 << 20

// Request is the body of POST /hint.
type Request struct {
	// Files are the paths in the order the reader will open them.
	Files []string `json:"files"`
	// Epoch is the epoch the order is for (informational: logged).
	Epoch *int `json:"epoch,omitempty"`
	// Stream names the reader ("" by default; at most 256 bytes).
	Stream string `json:"stream,omitempty"`
}

// Reply is the body of a 200 reply.
type Reply struct {
	Files      int `json:"files"`
	Unknown    int `json:"unknown"`
	Duplicates int `json:"duplicates"`
}

// Decode reads a Request from r, at most maxBytes bytes. Errors:
// ErrBadRequest.
func Decode(r io.Reader, maxBytes int64) (Request, error) {
	var req Request
	dec := json.NewDecoder(io.LimitReader(r, maxBytes+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return req, fmt.Errorf("%w: body truncated or over %d bytes", ErrBadRequest, maxBytes)
		}
		return req, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if req.Files == nil {
		return req, fmt.Errorf(`%w: no "files" list`, ErrBadRequest)
	}
	if len(req.Stream) > 256 {
		return req, fmt.Errorf("%w: stream name over 256 bytes", ErrBadRequest)
	}
	return req, nil
}

// Keys maps paths (relative to mountpoint, or absolute under it; "/"
// separated) to object keys of a mount whose key prefix is prefix ("" or
// ending in "/"). mountpoint must be absolute and clean. Errors:
// ErrOutside or ErrBadPath, naming the first offending path and its
// position.
func Keys(paths []string, mountpoint, prefix string) ([]string, error) {
	mp := path.Clean(mountpoint)
	if !path.IsAbs(mp) {
		return nil, fmt.Errorf("%w: mount point %q is not absolute", ErrBadPath, mountpoint)
	}
	keys := make([]string, 0, len(paths))
	for i, p := range paths {
		rel, err := relative(p, mp)
		if err != nil {
			return nil, fmt.Errorf("files[%d] %q: %w", i, p, err)
		}
		keys = append(keys, prefix+rel)
	}
	return keys, nil
}

// relative returns p relative to mp (both "/"-separated), clean.
func relative(p, mp string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", ErrBadPath
	}
	var rel string
	if path.IsAbs(p) {
		c := path.Clean(p)
		switch {
		case c == mp:
			return "", fmt.Errorf("%w: the mount point itself", ErrBadPath)
		case mp == "/":
			rel = c[1:]
		case strings.HasPrefix(c, mp+"/"):
			rel = c[len(mp)+1:]
		default:
			return "", fmt.Errorf("%w %s", ErrOutside, mp)
		}
	} else {
		rel = path.Clean(p)
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "", fmt.Errorf("%w %s", ErrOutside, mp)
		}
		if rel == "." {
			return "", fmt.Errorf("%w: the mount point itself", ErrBadPath)
		}
	}
	return rel, nil
}

// Hinter receives hints; *prefetch.Manager is one.
type Hinter interface {
	Hint(stream string, keys []string) (prefetch.HintStatus, error)
}

var _ Hinter = (*prefetch.Manager)(nil)

// Handler serves POST /hint for the mount at mountpoint (absolute, clean)
// whose keys start with prefix, passing the keys to h. logf, when not nil,
// receives one line per hint.
func Handler(h Hinter, mountpoint, prefix string, logf func(format string, a ...any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			reply(w, http.StatusMethodNotAllowed, map[string]string{"error": "POST a JSON hint"})
			return
		}
		req, err := Decode(r.Body, MaxBodyBytes)
		if err != nil {
			reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		keys, err := Keys(req.Files, mountpoint, prefix)
		if err != nil {
			reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		st, err := h.Hint(req.Stream, keys)
		if logf != nil {
			epoch := "-"
			if req.Epoch != nil {
				epoch = fmt.Sprint(*req.Epoch)
			}
			logf("hint: stream %q, epoch %s, %d paths: %d files, %d unknown, %d duplicates, err %v", req.Stream, epoch, len(keys), st.Files, st.Unknown, st.Duplicates, err)
		}
		switch {
		case errors.Is(err, prefetch.ErrNoHint):
			reply(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error() + " (list the dataset's directories first)"})
		case err != nil:
			reply(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		default:
			reply(w, http.StatusOK, Reply{Files: st.Files, Unknown: st.Unknown, Duplicates: st.Duplicates})
		}
	})
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
