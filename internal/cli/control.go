package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/os2g/os2g/gdd"
)

// The control socket of a mount: a Unix socket per mount point that
// serves the mount's metrics (os2g stats) and hints (package hint).

// controlSocketName is the file name of the control socket of the mount
// at mp (absolute, symlinks resolved): the first 16 hex digits of the
// SHA-256 of the path, plus ".sock".
func controlSocketName(mp string) string {
	sum := sha256.Sum256([]byte(mp))
	return hex.EncodeToString(sum[:])[:16] + ".sock"
}

// controlSocketPaths lists the places the control socket of mp may be, in
// the order the daemon tries them: /run/os2g, then os2g-UID under
// os.TempDir() (for a daemon that cannot write /run).
func controlSocketPaths(mp string) []string {
	name := controlSocketName(mp)
	return []string{
		filepath.Join("/run/os2g", name),
		filepath.Join(os.TempDir(), "os2g-"+strconv.Itoa(os.Geteuid()), name),
	}
}

// privateDir creates dir (mode 0700) if needed and checks that it is a
// directory owned by this user that nobody else can enter.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is not a private directory of uid %d (mode %v)", dir, os.Geteuid(), st.Mode())
	}
	return nil
}

// controlRoute is one more handler of the control socket (e.g. POST
// /hint, package hint).
type controlRoute struct {
	pattern string
	h       http.Handler
}

// startControl serves reg's metrics over HTTP (GET /metrics), and routes,
// on the control socket of the mount at mp (mode 0600, in a 0700
// directory) until stop is called, which removes the socket. A socket left by a daemon that
// died is replaced. If no place works it logs a warning and serves
// nothing: the mount works without it. stop is never nil.
func startControl(reg *prometheus.Registry, mp string, log *slog.Logger, routes ...controlRoute) (stop func()) {
	var errs []error
	for _, p := range controlSocketPaths(mp) {
		if err := privateDir(filepath.Dir(p)); err != nil {
			errs = append(errs, err)
			continue
		}
		ln, err := gdd.Listen(p, 0o600)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		for _, r := range routes {
			mux.Handle(r.pattern, r.h)
		}
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(ln)
		log.Info("serving the control socket", "socket", p)
		return func() {
			hs.Close()
			ln.Close() // removes the socket (hs.Close may have closed ln already)
		}
	}
	log.Warn("no control socket: os2g stats will not find this daemon", "err", oneLine(errors.Join(errs...).Error()))
	return func() {}
}

// fetchMetrics GETs /metrics from the control socket at sock.
func fetchMetrics(ctx context.Context, sock string) ([]byte, error) {
	c := &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://os2g/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, oneLine(string(body)))
	}
	return body, nil
}
