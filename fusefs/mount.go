package fusefs

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
)

// Server is a mounted filesystem.
type Server struct {
	srv        *fuse.Server
	fsys       *filesys
	root       *dirNode
	mountpoint string
	done       chan struct{} // closed when serving has stopped

	mu sync.Mutex // serialises Unmount
}

// Mount validates o, mounts the bucket (under o.Prefix) at mountpoint and
// serves it in the background. It returns once the kernel has the mount.
// Mounting as root uses mount(2) directly; otherwise fusermount3.
func Mount(mountpoint string, o Options) (*Server, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	mp, err := filepath.Abs(mountpoint)
	if err == nil {
		// /proc/<pid>/fd links show the resolved path.
		mp, err = filepath.EvalSymlinks(mp)
	}
	if err != nil {
		return nil, fmt.Errorf("fusefs: mountpoint %q: %w", mountpoint, err)
	}
	bg, cancel := context.WithCancel(context.Background())
	f := &filesys{o: o, store: o.Store, log: o.Logger, pf: o.Prefetch, mtime: time.Now(), mountpoint: mp, bg: bg, cancel: cancel, preListSem: make(chan struct{}, o.preListConcurrency), warned: map[string]struct{}{}, clock: o.clock}
	f.dc = o.DiskCache
	if o.ptTest == 2 {
		f.pt.probed, f.pt.ok = true, true
	}
	root := newDirNode(f, o.Prefix, "")

	ttl, neg := o.MetadataTTL, o.NegativeTTL
	mo := fuse.MountOptions{
		FsName:        o.FSName,
		Name:          "os2g",
		MaxWrite:      fuse.MAX_KERNEL_WRITE,
		MaxReadAhead:  fuse.MAX_KERNEL_WRITE,
		MaxBackground: o.MaxBackground,
		AllowOther:    o.AllowOther,
		Debug:         o.Debug,
		DirectMount:   os.Geteuid() == 0,
		EnableLocks:   false,
		// The kernel checks permissions against the modes we report.
		Options: []string{"default_permissions"},
		// O_TRUNC arrives with OPEN instead of a separate SETATTR, so an
		// overwrite never shows an empty file before it is committed;
		// READDIRPLUS only when the kernel thinks it helps.
		// DIRECT_IO_ALLOW_MMAP keeps mmap working on the direct-I/O
		// read handles opened during an overwrite (Linux 6.6+).
		ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_READDIRPLUS_AUTO | fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		// Replies come from memory; splicing them only adds a copy (and
		// fails for 1 MiB replies with the default pipe size).
		DisableSplice: true,
	}
	if o.Immutable {
		// Names and attributes are kept forever: READDIRPLUS on every
		// readdir gives the kernel each entry's dentry and attributes
		// at once, so that opening the files of a listed directory
		// (an ImageFolder scan, then the epoch) needs no LOOKUP.
		mo.ExtraCapabilities &^= fuse.CAP_READDIRPLUS_AUTO
	}
	if o.ptTest > 0 {
		mo.DisabledCapabilities |= fuse.CAP_PASSTHROUGH
	}
	if o.ReadOnly {
		mo.Options = append(mo.Options, "ro")
		mo.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_RDONLY
	}
	if o.Debug {
		// Every FUSE request, to the mount's own log (--log-file), never
		// to the terminal of the process that started the daemon.
		mo.Logger = log.New(logWriter{o.Logger, slog.LevelDebug}, "", 0)
	} else {
		mo.Logger = log.New(logWriter{o.Logger, slog.LevelWarn}, "", 0)
	}
	srv, err := mountNodeFS(mp, root, &fs.Options{
		MountOptions:    mo,
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &neg,
		UID:             o.UID,
		GID:             o.GID,
	}, o.Registerer, o.ioctlViaBridge)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fusefs: mount %s: %w", mp, err)
	}
	f.srv.Store(srv)
	s := &Server{srv: srv, fsys: f, root: root, mountpoint: mp, done: make(chan struct{})}
	if o.KernelReadAheadKB > 0 {
		s.setReadAhead(o.KernelReadAheadKB)
	}
	go func() {
		srv.Wait()
		cancel()
		f.bgWG.Wait()
		close(s.done)
	}()
	return s, nil
}

// mountNodeFS mounts root at mp as fs.Mount does, with IOCTL answered by
// ioctlFastFS unless viaBridge (tests), and every operation counted by
// meteredFS when reg is set.
func mountNodeFS(mp string, root fs.InodeEmbedder, opts *fs.Options, reg prometheus.Registerer, viaBridge bool) (*fuse.Server, error) {
	raw := fs.NewNodeFS(root, opts)
	if !viaBridge {
		raw = ioctlFastFS{raw}
	}
	if reg != nil {
		m, err := newOpMetrics(reg)
		if err != nil {
			return nil, err
		}
		raw = meteredFS{raw, m}
	}
	srv, err := fuse.NewServer(raw, mp, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		// As in fs.Mount: a mount that failed has no loop to stop.
		return nil, err
	}
	return srv, nil
}

// setReadAhead raises the kernel readahead of the mount's backing device
// (the FUSE INIT reply cannot exceed the kernel's 128 KiB default), so
// sequential reads and mmap faults reach the daemon as large requests.
func (s *Server) setReadAhead(kb int) {
	var st syscall.Stat_t
	if err := syscall.Stat(s.mountpoint, &st); err != nil {
		s.fsys.log.Debug("readahead: stat mountpoint", "err", err)
		return
	}
	dev := uint64(st.Dev)
	major, minor := (dev>>8)&0xfff|(dev>>32)&^0xfff, dev&0xff|(dev>>12)&^0xff
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", major, minor)
	if err := os.WriteFile(p, []byte(strconv.Itoa(kb)), 0); err != nil {
		s.fsys.log.Debug("readahead: not set", "path", p, "err", err)
	}
}

// Mountpoint returns the absolute mount point.
func (s *Server) Mountpoint() string { return s.mountpoint }

// Wait blocks until the filesystem is unmounted (by Unmount, by
// `fusermount3 -u` or `umount`) and serving has stopped.
func (s *Server) Wait() { <-s.done }

// Unmount unmounts the filesystem and waits until serving has stopped.
// It fails (EBUSY) while files are open or a process has its cwd inside;
// after an unmount by any means it returns nil.
func (s *Server) Unmount() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return nil
	default:
	}
	if err := s.srv.Unmount(); err != nil {
		select {
		case <-s.done:
			return nil
		default:
		}
		return fmt.Errorf("fusefs: unmount %s: %w", s.mountpoint, err)
	}
	<-s.done
	return nil
}

// logWriter turns go-fuse's log lines into records of the mount's logger
// at one level.
type logWriter struct {
	l     *slog.Logger
	level slog.Level
}

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Log(context.Background(), w.level, "go-fuse: "+strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
