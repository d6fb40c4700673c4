package fusefs

import (
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
)

// FUSE operation metrics (Options.Registerer): every kernel request the
// daemon answers, by operation and result, with the time the daemon took.
//
//	os2g_fuse_ops_total{op="read",status="ok"}        status: "ok" or the errno's name (ENOENT, EIO, ...)
//	os2g_fuse_op_duration_seconds{op="read"}         histogram
//
// The time is from the request's arrival in the daemon to its answer
// (for a read, until the reply's data is ready; the write to /dev/fuse
// follows). Requests with no answer (FORGET, RELEASE, RELEASEDIR) and
// rare ones (xattrs, locks, ioctl) are not counted.

// opMetrics holds the collectors.
type opMetrics struct {
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newOpMetrics(reg prometheus.Registerer) (*opMetrics, error) {
	m := &opMetrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "os2g", Subsystem: "fuse", Name: "ops_total",
			Help: "FUSE requests answered, by operation and result (ok or the errno's name)",
		}, []string{"op", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "os2g", Subsystem: "fuse", Name: "op_duration_seconds",
			Help:    "time the daemon took to answer a FUSE request, by operation",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12), // 10 µs to 42 s
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.ops, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records one answered request of op that started at start.
func (m *opMetrics) observe(op string, start time.Time, st fuse.Status) {
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	m.ops.WithLabelValues(op, statusName(st)).Inc()
}

// statusName is "ok" or the errno's symbolic name ("ENOENT").
func statusName(st fuse.Status) string {
	if st == fuse.OK {
		return "ok"
	}
	if n := errnoName(syscall.Errno(st)); n != "" {
		return n
	}
	return "errno" + strconv.Itoa(int(st))
}

// errnoName names the errnos a file system answers with.
func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EIO:
		return "EIO"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.EROFS:
		return "EROFS"
	case syscall.ESTALE:
		return "ESTALE"
	case syscall.EINTR:
		return "EINTR"
	case syscall.EEXIST:
		return "EEXIST"
	case syscall.ENOTEMPTY:
		return "ENOTEMPTY"
	case syscall.EISDIR:
		return "EISDIR"
	case syscall.ENOTDIR:
		return "ENOTDIR"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.ENOSYS:
		return "ENOSYS"
	case syscall.ENOTSUP:
		return "ENOTSUP"
	case syscall.ENOSPC:
		return "ENOSPC"
	case syscall.EFBIG:
		return "EFBIG"
	case syscall.EBADF:
		return "EBADF"
	case syscall.ENAMETOOLONG:
		return "ENAMETOOLONG"
	case syscall.EAGAIN:
		return "EAGAIN"
	case syscall.ENODATA:
		return "ENODATA"
	case syscall.ETIMEDOUT:
		return "ETIMEDOUT"
	}
	return ""
}

// meteredFS is a fuse.RawFileSystem that records opMetrics for the
// requests a mount answers and passes everything to the node file system.
type meteredFS struct {
	fuse.RawFileSystem
	m *opMetrics
}

func (f meteredFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Lookup(c, h, name, out)
	f.m.observe("lookup", t, st)
	return st
}

func (f meteredFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.GetAttr(c, in, out)
	f.m.observe("getattr", t, st)
	return st
}

func (f meteredFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.SetAttr(c, in, out)
	f.m.observe("setattr", t, st)
	return st
}

func (f meteredFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Mkdir(c, in, name, out)
	f.m.observe("mkdir", t, st)
	return st
}

func (f meteredFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Unlink(c, h, name)
	f.m.observe("unlink", t, st)
	return st
}

func (f meteredFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Rmdir(c, h, name)
	f.m.observe("rmdir", t, st)
	return st
}

func (f meteredFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Rename(c, in, oldName, newName)
	f.m.observe("rename", t, st)
	return st
}

func (f meteredFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Access(c, in)
	f.m.observe("access", t, st)
	return st
}

func (f meteredFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Create(c, in, name, out)
	f.m.observe("create", t, st)
	return st
}

func (f meteredFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Open(c, in, out)
	f.m.observe("open", t, st)
	return st
}

func (f meteredFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	t := time.Now()
	r, st := f.RawFileSystem.Read(c, in, buf)
	f.m.observe("read", t, st)
	return r, st
}

func (f meteredFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := f.RawFileSystem.Write(c, in, data)
	f.m.observe("write", t, st)
	return n, st
}

func (f meteredFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	t := time.Now()
	n, st := f.RawFileSystem.Writev(c, in, data)
	f.m.observe("write", t, st)
	return n, st
}

func (f meteredFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Flush(c, in)
	f.m.observe("flush", t, st)
	return st
}

func (f meteredFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Fsync(c, in)
	f.m.observe("fsync", t, st)
	return st
}

func (f meteredFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.OpenDir(c, in, out)
	f.m.observe("opendir", t, st)
	return st
}

func (f meteredFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.ReadDir(c, in, out)
	f.m.observe("readdir", t, st)
	return st
}

func (f meteredFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.ReadDirPlus(c, in, out)
	f.m.observe("readdirplus", t, st)
	return st
}

func (f meteredFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.StatFs(c, h, out)
	f.m.observe("statfs", t, st)
	return st
}

func (f meteredFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	t := time.Now()
	st := f.RawFileSystem.Lseek(c, in, out)
	f.m.observe("lseek", t, st)
	return st
}
