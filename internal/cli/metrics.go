package cli

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/os2g/os2g/objclient"
)

// Write-side metrics of a mount: the uploads the file system starts
// (a file created or overwritten through the mount), how they end, the
// bytes written into them and how long the commit (the last part and
// CompleteMultipartUpload, or the single PUT) took.
//
//	os2g_uploads_started_total
//	os2g_uploads_committed_total
//	os2g_uploads_failed_total                  commit failed, or aborted
//	os2g_upload_bytes_total                    bytes written into uploads
//	os2g_upload_commit_duration_seconds        histogram
//
// objclient counts the multipart parts (os2g_upload_parts_total).

// uploadMetrics holds the write-side collectors.
type uploadMetrics struct {
	started, committed, failed, bytes prometheus.Counter
	commit                            prometheus.Histogram
}

func newUploadMetrics(reg prometheus.Registerer) *uploadMetrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "os2g", Name: name, Help: help})
	}
	m := &uploadMetrics{
		started:   c("uploads_started_total", "uploads started (files created or overwritten through the mount)"),
		committed: c("uploads_committed_total", "uploads committed: the object is stored"),
		failed:    c("uploads_failed_total", "uploads that failed to commit or were aborted"),
		bytes:     c("upload_bytes_total", "bytes written into uploads"),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "os2g", Name: "upload_commit_duration_seconds",
			Help:    "time to commit an upload (last part and CompleteMultipartUpload, or the single PUT)",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16), // 1 ms to 33 s
		}),
	}
	reg.MustRegister(m.started, m.committed, m.failed, m.bytes, m.commit)
	return m
}

// meteredStore is an objclient.Store whose uploads record uploadMetrics;
// every other call goes to the embedded store as it is.
type meteredStore struct {
	objclient.Store
	m *uploadMetrics
}

func (s meteredStore) Put(ctx context.Context, key string, opts objclient.PutOptions) (objclient.Writer, error) {
	s.m.started.Inc()
	w, err := s.Store.Put(ctx, key, opts)
	if err != nil {
		s.m.failed.Inc()
		return nil, err
	}
	return &meteredWriter{Writer: w, m: s.m}, nil
}

// meteredWriter counts the bytes of an upload and how it ends (once,
// whichever of Commit and Abort comes first).
type meteredWriter struct {
	objclient.Writer
	m    *uploadMetrics
	done atomic.Bool
}

func (w *meteredWriter) Write(p []byte) (int, error) {
	n, err := w.Writer.Write(p)
	w.m.bytes.Add(float64(n))
	return n, err
}

func (w *meteredWriter) Commit(ctx context.Context) (objclient.ObjectInfo, error) {
	t := time.Now()
	info, err := w.Writer.Commit(ctx)
	w.m.commit.Observe(time.Since(t).Seconds())
	if w.done.CompareAndSwap(false, true) {
		if err != nil {
			w.m.failed.Inc()
		} else {
			w.m.committed.Inc()
		}
	}
	return info, err
}

func (w *meteredWriter) Abort(ctx context.Context) error {
	if w.done.CompareAndSwap(false, true) {
		w.m.failed.Inc()
	}
	return w.Writer.Abort(ctx)
}

// registerBuildInfo registers os2g_build_info{version,commit,goversion} 1.
// version and commit are the stamped ones ("" takes the build information).
func registerBuildInfo(reg prometheus.Registerer, version, commit string) {
	version, commit = versionParts(version, commit)
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "os2g", Name: "build_info",
		Help:        "1, labelled with the version and commit of the running daemon",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "goversion": runtime.Version()},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// registerLogInfo registers os2g_log_info{destination} 1: where the
// daemon logs (a file path, "syslog" or "stderr"), for os2g stats.
func registerLogInfo(reg prometheus.Registerer, destination string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "os2g", Name: "log_info",
		Help:        "1, labelled with where the daemon logs (a file, syslog or stderr)",
		ConstLabels: prometheus.Labels{"destination": destination},
	})
	g.Set(1)
	reg.MustRegister(g)
}
