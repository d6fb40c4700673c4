package cli

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sizeSuffixes maps a case-insensitive size suffix to its multiplier.
// Binary suffixes (KiB, K) are powers of 1024 as in dd(1); SI suffixes (KB)
// powers of 1000.
var sizeSuffixes = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseSize parses a byte count such as "4096", "512MiB", "2GiB", "1.5G",
// "8M" or "100MB". K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024,
// KB/MB/GB/TB powers of 1000; suffixes are case-insensitive. The result is
// in bytes and must be non-negative and fit an int64.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	lower := strings.ToLower(t)
	mult := 1.0
	for _, sf := range sizeSuffixes {
		if strings.HasSuffix(lower, sf.suffix) {
			mult = sf.mult
			lower = strings.TrimSpace(strings.TrimSuffix(lower, sf.suffix))
			break
		}
	}
	if n, err := strconv.ParseInt(lower, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("size %q is negative", s)
		}
		if float64(n)*mult > math.MaxInt64 {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		return n * int64(mult), nil
	}
	f, err := strconv.ParseFloat(lower, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a number with a suffix such as 512MiB or 2GiB)", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	v := math.Round(f * mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v), nil
}

// FormatSize renders n bytes with a binary suffix ("1.5 GiB").
func FormatSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// sizeFlag is a pflag.Value holding a byte count parsed by ParseSize.
type sizeFlag struct {
	v   int64
	set bool
}

func (f *sizeFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	return strconv.FormatInt(f.v, 10)
}

func (f *sizeFlag) Type() string { return "size" }

func (f *sizeFlag) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	f.v, f.set = n, true
	return nil
}

// modeFlag is a pflag.Value holding permission bits written in octal ("0644", "755").
type modeFlag struct{ v os.FileMode }

func (f *modeFlag) String() string {
	if f == nil {
		return ""
	}
	return fmt.Sprintf("%04o", uint32(f.v))
}

func (f *modeFlag) Type() string { return "octal" }

func (f *modeFlag) Set(s string) error {
	n, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O"), 8, 32)
	if err != nil || n > 0o7777 {
		return fmt.Errorf("invalid mode %q (want octal permission bits such as 0644)", s)
	}
	f.v = os.FileMode(n)
	return nil
}

// TTLIndefinite is the --metadata-ttl of "indefinite": about 100 years,
// which stands in for "forever" (Mountpoint for S3's keyword).
const TTLIndefinite = 100 * 365 * 24 * time.Hour

// TTLMinimal is the --metadata-ttl of "minimal": one second, Mountpoint for
// S3's "minimal" (the shortest TTL that still lets one open(2) reuse the
// attributes its lookup fetched).
const TTLMinimal = time.Second

// ParseTTL parses a metadata TTL: a Go duration ("90s", "5m", "1h30m"), a
// whole or fractional number of seconds ("30", "0.5"), or Mountpoint for
// S3's keywords "indefinite" (TTLIndefinite) and "minimal" (TTLMinimal).
// Negative values are errors.
func ParseTTL(s string) (time.Duration, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "indefinite":
		return TTLIndefinite, nil
	case "minimal":
		return TTLMinimal, nil
	case "":
		return 0, fmt.Errorf("empty TTL")
	}
	var d time.Duration
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f*float64(time.Second) >= math.MaxInt64 {
			return 0, fmt.Errorf("invalid TTL %q", s)
		}
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(t); err != nil {
		return 0, fmt.Errorf("invalid TTL %q (want seconds, a duration such as 90s or 5m, indefinite or minimal)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("TTL %q is negative", s)
	}
	return d, nil
}

// ttlFlag is a pflag.Value holding a duration parsed by ParseTTL.
type ttlFlag struct{ v time.Duration }

func (f *ttlFlag) String() string {
	if f == nil {
		return ""
	}
	switch f.v {
	case TTLIndefinite:
		return "indefinite"
	}
	return f.v.String()
}

func (f *ttlFlag) Type() string { return "ttl" }

func (f *ttlFlag) Set(s string) error {
	d, err := ParseTTL(s)
	if err != nil {
		return err
	}
	f.v = d
	return nil
}

// memoryLimit returns min(physical RAM, this process's cgroup memory limit)
// in bytes. root is "/" in production; tests point it at a fake tree.
func memoryLimit(root string) (int64, error) {
	ram, err := physicalRAM(root)
	if err != nil {
		return 0, err
	}
	if cg, ok := cgroupLimit(root); ok && cg < ram {
		return cg, nil
	}
	return ram, nil
}

// defaultMaxMemory is the --max-memory default: a quarter of memoryLimit.
func defaultMaxMemory() (int64, error) {
	lim, err := memoryLimit("/")
	if err != nil {
		return 0, err
	}
	return lim / 4, nil
}

func physicalRAM(root string) (int64, error) {
	f, err := os.Open(filepath.Join(root, "proc/meminfo"))
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				kb, err := strconv.ParseInt(fields[1], 10, 64)
				if err == nil && kb > 0 {
					return kb << 10, nil
				}
			}
		}
	}
	if root != "/" {
		return 0, fmt.Errorf("no MemTotal in %s/proc/meminfo", root)
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("reading physical memory size: %w", err)
	}
	return int64(si.Totalram) * int64(si.Unit), nil
}

// cgroupLimit reads the memory limit of this process's cgroup (v2
// memory.max, or v1 memory.limit_in_bytes), walking up to the root of the
// hierarchy since a parent's limit also applies. ok is false when there is
// no limit.
func cgroupLimit(root string) (limit int64, ok bool) {
	f, err := os.Open(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	best := int64(math.MaxInt64)
	consider := func(file string) {
		b, err := os.ReadFile(file)
		if err != nil {
			return
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return
		}
		n, err := strconv.ParseInt(s, 10, 64)
		// cgroup v1 reports "no limit" as a huge page-rounded number.
		if err != nil || n <= 0 || n >= 1<<62 {
			return
		}
		best = min(best, n)
	}
	walk := func(base, rel, name string) {
		for dir := filepath.Join(base, rel); ; dir = filepath.Dir(dir) {
			consider(filepath.Join(dir, name))
			if dir == base || !strings.HasPrefix(dir, base) {
				break
			}
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			walk(filepath.Join(root, "sys/fs/cgroup"), parts[2], "memory.max")
		case hasController(parts[1], "memory"):
			walk(filepath.Join(root, "sys/fs/cgroup/memory"), parts[2], "memory.limit_in_bytes")
		}
	}
	if best == math.MaxInt64 {
		return 0, false
	}
	return best, true
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
