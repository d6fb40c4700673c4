package prefetch

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counters are the Manager's monotonic counts.
type counters struct {
	requests      [3]atomic.Int64 // GETs started, by origin
	fetched       atomic.Int64    // bytes received from the Getter
	read          atomic.Int64    // bytes returned by ReadAt
	hits          atomic.Int64
	joins         atomic.Int64
	misses        atomic.Int64
	evictions     atomic.Int64
	errors        atomic.Int64
	budgetWaits   atomic.Int64
	aheadSkipped  atomic.Int64
	epochStarts   atomic.Int64
	epochFiles    atomic.Int64
	epochSkipped  atomic.Int64
	epochHitOpens atomic.Int64
	epochRefused  atomic.Int64
	hints         atomic.Int64
	hintsStale    atomic.Int64
	hintFiles     atomic.Int64
	diskPuts      atomic.Int64
	diskErrors    atomic.Int64
	diskSkipped   atomic.Int64
	opens         atomic.Int64 // Readers opened
}

// Stats is a snapshot of a Manager's counters and gauges. Byte fields are
// in bytes.
type Stats struct {
	// Requests is the number of GETs started: DemandRequests by readers'
	// own misses, AheadRequests by read-ahead, EpochRequests by epoch
	// pre-reading.
	Requests, DemandRequests, AheadRequests, EpochRequests int64
	// BytesFetched were received from the Getter; BytesRead were returned
	// by ReadAt.
	BytesFetched, BytesRead int64
	// Hits: extent lookups by a read that found the bytes cached; Joins:
	// found them in flight (a GET already running); Misses: started a GET.
	Hits, Joins, Misses int64
	// Evictions of cached extents to make room; FetchErrors: failed GETs
	// (cancellations included).
	Evictions, FetchErrors int64
	// BudgetWaits: times a demand read waited for memory; AheadSkipped:
	// read-ahead pieces not started for lack of memory.
	BudgetWaits, AheadSkipped int64
	// InUse: bytes reserved now (in flight + cached); Peak: its high-water
	// mark; Cached: bytes of fetched extents in the cache; MaxMemory: the
	// budget.
	InUse, Peak, Cached, MaxMemory int64
	// EpochStarts: pre-reader runs started; EpochFiles: files pre-read;
	// EpochSkipped: pre-reads deferred for lack of memory; EpochHeld: bytes
	// of pre-read files not yet read; EpochRunning: pre-readers running now;
	// EpochHitOpens: handles whose first read found pre-read bytes.
	EpochStarts, EpochFiles, EpochSkipped, EpochHeld, EpochHitOpens int64
	EpochRunning                                                    int
	// EpochOpened: pre-read files that a handle then read in their epoch;
	// EpochUnopened: pre-read files that none read before their epoch
	// ended; EpochWasted: the bytes of those (fetched, never read);
	// EpochRefused: candidates the usefulness controller held back (see
	// useful.go). The current epoch's files count as unopened only once
	// it ends.
	EpochOpened, EpochUnopened, EpochWasted, EpochRefused int64
	// Hints: exact-order hints accepted (Manager.Hint); HintsStale: hints
	// dropped because the reader moved on; HintFiles: files pre-read for
	// hints (also counted in EpochOpened/EpochUnopened/EpochWasted, as
	// they are opened or their hint ends).
	Hints, HintsStale, HintFiles int64
	// DiskPuts: files copied to Options.DiskCache; DiskPutErrors: copies
	// that failed (a Put error, or bytes evicted during the copy);
	// DiskSkipped: files read whole but not copied because bytes were no
	// longer cached or DiskCacheConcurrency copies ran.
	DiskPuts, DiskPutErrors, DiskSkipped int64
}

// Stats returns a snapshot of the Manager's counters.
func (m *Manager) Stats() Stats {
	c := &m.st
	s := Stats{
		DemandRequests: c.requests[originDemand].Load(),
		AheadRequests:  c.requests[originAhead].Load(),
		EpochRequests:  c.requests[originEpoch].Load(),
		BytesFetched:   c.fetched.Load(),
		BytesRead:      c.read.Load(),
		Hits:           c.hits.Load(),
		Joins:          c.joins.Load(),
		Misses:         c.misses.Load(),
		Evictions:      c.evictions.Load(),
		FetchErrors:    c.errors.Load(),
		BudgetWaits:    c.budgetWaits.Load(),
		AheadSkipped:   c.aheadSkipped.Load(),
		EpochStarts:    c.epochStarts.Load(),
		EpochFiles:     c.epochFiles.Load(),
		EpochSkipped:   c.epochSkipped.Load(),
		EpochHitOpens:  c.epochHitOpens.Load(),
		EpochRefused:   c.epochRefused.Load(),
		Hints:          c.hints.Load(),
		HintsStale:     c.hintsStale.Load(),
		HintFiles:      c.hintFiles.Load(),
		DiskPuts:       c.diskPuts.Load(),
		DiskPutErrors:  c.diskErrors.Load(),
		DiskSkipped:    c.diskSkipped.Load(),
		MaxMemory:      m.o.MaxMemory,
	}
	s.Requests = s.DemandRequests + s.AheadRequests + s.EpochRequests
	m.mu.Lock()
	s.InUse, s.Peak = m.inUse, m.peak
	s.Cached = m.fresh.bytes + m.used.bytes
	s.EpochHeld = m.epochHeld
	for _, d := range m.dirs {
		if d.running {
			s.EpochRunning++
		}
	}
	s.EpochOpened, s.EpochUnopened, s.EpochWasted = m.usefulnessLocked()
	m.mu.Unlock()
	return s
}

// usefulnessLocked sums the controllers' totals: pre-read files opened,
// not opened, and the bytes of those.
func (m *Manager) usefulnessLocked() (opened, unopened, wasted int64) {
	for _, d := range m.dirs {
		opened += d.u.totOpened
		unopened += d.u.totUnopened
		wasted += d.u.totWasted
	}
	return opened + m.hintOpened, unopened + m.hintUnopened, wasted + m.hintWasted
}

// registerMetrics registers the Manager's metrics with reg (nil: none).
// Every metric reads the same counters as Stats, so they never disagree.
func (m *Manager) registerMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	c := &m.st
	counter := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "os2g", Subsystem: "prefetch", Name: name, Help: help},
			func() float64 { return float64(f()) })
	}
	var cs []prometheus.Collector
	for o, name := range []string{"demand", "readahead", "epoch"} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "os2g", Subsystem: "prefetch", Name: "requests_total",
			Help: "Range GETs started, by origin.", ConstLabels: prometheus.Labels{"origin": name},
		}, func() float64 { return float64(c.requests[o].Load()) }))
	}
	cs = append(cs,
		counter("fetched_bytes_total", "Bytes received from the object store.", c.fetched.Load),
		counter("read_bytes_total", "Bytes returned to readers.", c.read.Load),
		counter("cache_hits_total", "Reads that found their bytes cached.", c.hits.Load),
		counter("cache_joins_total", "Reads that joined a GET already in flight.", c.joins.Load),
		counter("cache_misses_total", "Reads that started a GET.", c.misses.Load),
		counter("evictions_total", "Cached extents evicted for room.", c.evictions.Load),
		counter("fetch_errors_total", "Failed GETs (cancellations included).", c.errors.Load),
		counter("budget_waits_total", "Demand reads that waited for memory.", c.budgetWaits.Load),
		counter("readahead_skipped_total", "Read-ahead pieces not started for lack of memory.", c.aheadSkipped.Load),
		counter("epoch_files_total", "Files pre-read by epoch pre-reading.", c.epochFiles.Load),
		counter("epoch_hit_opens_total", "Handles whose first read found pre-read bytes.", c.epochHitOpens.Load),
		counter("hints_total", "Exact-order hints accepted.", c.hints.Load),
		counter("hints_stale_total", "Exact-order hints dropped because the reader moved on.", c.hintsStale.Load),
		counter("hint_files_total", "Files pre-read for exact-order hints.", c.hintFiles.Load),
		counter("epoch_refused_total", "Pre-read candidates the usefulness controller held back.", c.epochRefused.Load),
		counter("epoch_opened_files_total", "Pre-read files read in their epoch.", func() int64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			o, _, _ := m.usefulnessLocked()
			return o
		}),
		counter("epoch_unopened_files_total", "Pre-read files not read before their epoch ended.", func() int64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			_, u, _ := m.usefulnessLocked()
			return u
		}),
		counter("epoch_wasted_bytes_total", "Bytes of pre-read files not read before their epoch ended.", func() int64 {
			m.mu.Lock()
			defer m.mu.Unlock()
			_, _, w := m.usefulnessLocked()
			return w
		}),
		counter("opens_total", "Readers opened: files read through the daemon.", c.opens.Load),
		counter("disk_puts_total", "Files copied from memory to the disk cache.", c.diskPuts.Load),
		counter("disk_put_errors_total", "Copies to the disk cache that failed.", c.diskErrors.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "os2g", Subsystem: "prefetch", Name: "budget_in_use_bytes",
			Help: "Bytes of the memory budget in use (in flight + cached)."},
			func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(m.inUse) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "os2g", Subsystem: "prefetch", Name: "budget_max_bytes",
			Help: "The memory budget."},
			func() float64 { return float64(m.o.MaxMemory) }),
	)
	var done []prometheus.Collector
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return fmt.Errorf("prefetch: register metrics: %w", errors.Join(ErrInvalidOptions, err))
		}
		done = append(done, col)
	}
	m.unreg = func() {
		for _, d := range done {
			reg.Unregister(d)
		}
	}
	return nil
}
