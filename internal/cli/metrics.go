package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/os2g/os2g/diskcache"
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

// diskCacheCollector exports a disk cache's counters as os2g_diskcache_*.
type diskCacheCollector struct {
	c     *diskcache.Cache
	descs map[string]*prometheus.Desc
}

var _ prometheus.Collector = (*diskCacheCollector)(nil)

// newDiskCacheCollector returns a collector of c's Stats.
func newDiskCacheCollector(c *diskcache.Cache) *diskCacheCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("os2g_diskcache_"+name, help, nil, nil)
	}
	return &diskCacheCollector{c: c, descs: map[string]*prometheus.Desc{
		"hits":      d("hits_total", "Opens served from the disk cache."),
		"misses":    d("misses_total", "Opens the disk cache could not serve."),
		"entries":   d("entries", "Objects held in the disk cache."),
		"bytes":     d("bytes", "Content bytes held in the disk cache."),
		"evictions": d("evictions_total", "Entries evicted to stay within --cache-size."),
		"corrupt":   d("corrupt_total", "Entries dropped because a checksum failed."),
	}}
}

// Describe implements prometheus.Collector.
func (d *diskCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range d.descs {
		ch <- v
	}
}

// Collect implements prometheus.Collector.
func (d *diskCacheCollector) Collect(ch chan<- prometheus.Metric) {
	s := d.c.Stats()
	ch <- prometheus.MustNewConstMetric(d.descs["hits"], prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(d.descs["misses"], prometheus.CounterValue, float64(s.Misses))
	ch <- prometheus.MustNewConstMetric(d.descs["entries"], prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(d.descs["bytes"], prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(d.descs["evictions"], prometheus.CounterValue, float64(s.Evictions))
	ch <- prometheus.MustNewConstMetric(d.descs["corrupt"], prometheus.CounterValue, float64(s.Corrupt))
}

// serveMetrics serves reg's metrics (GET /metrics) and Go's profiler
// (/debug/pprof/, for "go tool pprof http://ADDR/debug/pprof/profile") over
// TCP at addr until stop is called; "" serves nothing. stop is never nil
// when err is nil.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { hs.Close() }, nil
}
