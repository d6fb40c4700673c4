package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"log/syslog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Log destinations (issue 16: logs never lost).
//
// A foreground daemon logs to its stderr (the journal under systemd). A
// background daemon started without --log-file logs to syslog when a
// local syslog socket answers (on systemd hosts /dev/log is the journal),
// else to a file under the state directory, /var/log/os2g as root and
// $XDG_STATE_HOME/os2g (default ~/.local/state/os2g) otherwise, named after
// the mount point (mnt-data.log for /mnt/data). The parent chooses, so that
// it can name the file, and hands the choice to the daemon as --log-file or
// the hidden --log-syslog. Log files rotate at --log-max-size, keeping
// logKeep old files.

// logKeep is the number of rotated log files kept beside the live one.
const logKeep = 3

// logDest is where a background daemon's log goes.
type logDest struct {
	syslog bool   // the local syslog (or journal)
	path   string // else this file
}

// chooseLogDest picks the log destination of a background daemon serving
// mp that was given no --log-file. haveSyslog reports whether a local
// syslog socket answers; euid is the effective user id. It creates the
// state directory. An error says that there is no place to log to.
func chooseLogDest(e Env, euid int, haveSyslog func() bool, mp string) (logDest, error) {
	if haveSyslog() {
		return logDest{syslog: true}, nil
	}
	var dir string
	switch {
	case euid == 0:
		dir = "/var/log/os2g"
	case filepath.IsAbs(e.getenv("XDG_STATE_HOME")):
		dir = filepath.Join(e.getenv("XDG_STATE_HOME"), "os2g")
	case filepath.IsAbs(e.getenv("HOME")):
		dir = filepath.Join(e.getenv("HOME"), ".local", "state", "os2g")
	default:
		return logDest{}, fmt.Errorf("no log destination for the background daemon (no syslog, no $XDG_STATE_HOME or $HOME): pass --log-file")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return logDest{}, fmt.Errorf("creating the log directory (or pass --log-file): %w", err)
	}
	return logDest{path: filepath.Join(dir, logFileName(mp))}, nil
}

// logFileName names the log file of the mount at mp (absolute): the path
// without its leading "/", "/" read as "-" and other characters outside
// [A-Za-z0-9._-] as "_", then ".log"; "/" itself is "root.log".
func logFileName(mp string) string {
	s := strings.Trim(filepath.Clean(mp), "/")
	if s == "" {
		return "root.log"
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case c == '/':
			b[i] = '-'
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			b[i] = '_'
		}
	}
	return string(b) + ".log"
}

// localSyslog reports whether the local syslog socket answers.
func localSyslog() bool {
	w, err := syslog.Dial("", "", syslog.LOG_DAEMON|syslog.LOG_INFO, "os2g")
	if err != nil {
		return false
	}
	w.Close()
	return true
}

// openLogFile opens path for appending logs; with maxSize > 0 (bytes) it
// rotates at that size, keeping logKeep old files (lumberjack).
func openLogFile(path string, maxSize int64) (io.WriteCloser, error) {
	if maxSize <= 0 {
		return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	}
	// Fail now, not at the first log line, if the file cannot be written.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	f.Close()
	return &lumberjack.Logger{
		Filename:   path,
		MaxSize:    int((maxSize + 1<<20 - 1) >> 20), // lumberjack counts MiB
		MaxBackups: logKeep,
	}, nil
}

// newFormatHandler returns a text or JSON handler writing to w.
func newFormatHandler(format string, w io.Writer, o *slog.HandlerOptions) slog.Handler {
	if format == "json" {
		return slog.NewJSONHandler(w, o)
	}
	return slog.NewTextHandler(w, o)
}

// syslogSink formats one record at a time and sends it to syslog at the
// record's severity.
type syslogSink struct {
	mu  sync.Mutex // guards buf and the writes to w
	buf bytes.Buffer
	w   *syslog.Writer
}

func (s *syslogSink) Write(p []byte) (int, error) { return s.buf.Write(p) }

// syslogHandler is a slog.Handler that sends each record to syslog, with
// ERROR as err, WARN as warning, INFO as info and DEBUG as debug. syslog
// stamps the time, so the record's is left out.
type syslogHandler struct {
	inner slog.Handler // formats into sink
	sink  *syslogSink
}

// newSyslogHandler connects to the syslog at network/addr ("", "" for the
// local one) with tag os2g.
func newSyslogHandler(network, addr, format string, level slog.Leveler) (*syslogHandler, io.Closer, error) {
	w, err := syslog.Dial(network, addr, syslog.LOG_DAEMON|syslog.LOG_INFO, "os2g")
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to syslog: %w", err)
	}
	sink := &syslogSink{w: w}
	noTime := func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	return &syslogHandler{inner: newFormatHandler(format, sink, &slog.HandlerOptions{Level: level, ReplaceAttr: noTime}), sink: sink}, w, nil
}

func (h *syslogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *syslogHandler) Handle(ctx context.Context, r slog.Record) error {
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	h.sink.buf.Reset()
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	msg := strings.TrimSuffix(h.sink.buf.String(), "\n")
	switch {
	case r.Level >= slog.LevelError:
		return h.sink.w.Err(msg)
	case r.Level >= slog.LevelWarn:
		return h.sink.w.Warning(msg)
	case r.Level >= slog.LevelInfo:
		return h.sink.w.Info(msg)
	}
	return h.sink.w.Debug(msg)
}

func (h *syslogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &syslogHandler{inner: h.inner.WithAttrs(as), sink: h.sink}
}

func (h *syslogHandler) WithGroup(name string) slog.Handler {
	return &syslogHandler{inner: h.inner.WithGroup(name), sink: h.sink}
}

// teeHandler sends each record to every handler that takes its level.
type teeHandler []slog.Handler

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range t {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var first error
	for _, h := range t {
		if h.Enabled(ctx, r.Level) {
			if err := h.Handle(ctx, r.Clone()); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithAttrs(as)
	}
	return out
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithGroup(name)
	}
	return out
}
