package prefetch

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The RSS check (issue 5) runs each allocator in a child process of the
// test binary, because VmHWM is per process.
const (
	rssChildEnv = "OS2G_PREFETCH_RSS_CHILD"
	rssBudget   = 256 * mib
	rssSlack    = 64 * mib
	rssTotal    = 1024 * mib
)

// vmHWM returns the process's peak resident set size in bytes.
func vmHWM(t testing.TB) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// TestRSSChild is the child side of TestPeakRSSWithinBudget; it does
// nothing unless started by it.
func TestRSSChild(t *testing.T) {
	mode := os.Getenv(rssChildEnv)
	if mode == "" {
		t.Skip("child of TestPeakRSSWithinBudget only")
	}
	o := Options{Getter: wordGetter{size: rssTotal}, MaxMemory: rssBudget}
	switch mode {
	case "heap":
		o.Alloc = heapAlloc{}
	case "heap+limit":
		o.Alloc = heapAlloc{}
		debug.SetMemoryLimit(MemoryLimitFor(rssBudget))
	case "mmap", "small":
		// Options.Alloc nil: the default.
	case "small+limit":
		debug.SetMemoryLimit(MemoryLimitFor(rssBudget))
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	base := vmHWM(t)
	m := newTestManager(t, o)
	start := time.Now()
	if strings.HasPrefix(mode, "small") {
		// 32 KiB files read whole: blocks under MmapOptions.MinSize, from
		// the Go heap.
		const fsize = 32 * kib
		p := make([]byte, fsize)
		for i := range rssTotal / fsize {
			r := m.Open(File{Key: fmt.Sprintf("small/%d", i), Size: fsize, ETag: "w"})
			if n, err := r.ReadAt(context.Background(), p, 0); err != nil || n != len(p) {
				t.Fatalf("ReadAt: %d, %v", n, err)
			}
			r.Close()
		}
	} else {
		r := m.Open(File{Key: "big", Size: rssTotal, ETag: "w"})
		defer r.Close()
		p := make([]byte, 1*mib)
		for off := int64(0); off < rssTotal; off += int64(len(p)) {
			n, err := r.ReadAt(context.Background(), p, off)
			if err != nil || n != len(p) {
				t.Fatalf("ReadAt(%d): %d, %v", off, n, err)
			}
			if w := uint64(off / 8); p[0] != byte(w) || p[8] != byte(w+1) {
				t.Fatalf("bad bytes at %d", off)
			}
		}
	}
	el := time.Since(start)
	st := m.Stats()
	fmt.Printf("RSSRESULT %s base=%d hwm=%d peakInUse=%d secs=%.3f\n", mode, base, vmHWM(t), st.Peak, el.Seconds())
}

// TestPeakRSSWithinBudget reads 1 GiB sequentially through a Manager with
// a 256 MiB budget and checks that the default allocator keeps the peak
// RSS under budget + 64 MiB (issue 5). The Go-slice allocator, with and
// without a memory limit, and 1 GiB of 32 KiB files (heap blocks under the
// default allocator), with and without MemoryLimitFor, are measured and
// logged for comparison.
func TestPeakRSSWithinBudget(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is Linux only")
	}
	if os.Getenv(rssChildEnv) != "" {
		t.Skip("in a child")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory makes RSS meaningless")
	}
	results := map[string]int64{}
	for _, mode := range []string{"mmap", "heap+limit", "heap", "small", "small+limit"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRSSChild$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), rssChildEnv+"="+mode, "GOGC=100", "GOMEMLIMIT=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child %s: %v\n%s", mode, err, out)
		}
		var line string
		for l := range strings.Lines(string(out)) {
			if strings.HasPrefix(l, "RSSRESULT ") {
				line = strings.TrimSpace(l)
			}
		}
		if line == "" {
			t.Fatalf("child %s printed no result:\n%s", mode, out)
		}
		var m string
		var base, hwm, peak int64
		var secs float64
		if _, err := fmt.Sscanf(line, "RSSRESULT %s base=%d hwm=%d peakInUse=%d secs=%f", &m, &base, &hwm, &peak, &secs); err != nil {
			t.Fatalf("child %s: parse %q: %v", mode, line, err)
		}
		t.Logf("%-10s peak RSS %4d MiB (start %3d MiB), budget peak in use %3d MiB, %.0f MiB/s",
			mode, hwm>>20, base>>20, peak>>20, float64(rssTotal>>20)/secs)
		results[mode] = hwm
	}
	if got, lim := results["mmap"], int64(rssBudget+rssSlack); got > lim {
		t.Errorf("default allocator: peak RSS %d MiB, want at most budget + 64 MiB = %d MiB", got>>20, lim>>20)
	}
}
