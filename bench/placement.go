package main

// Placement: where each program of a trial runs.
//
// A training host's object store is remote, so its CPU is not the host's.
// The bench stands in for that by fencing the S3 server on --server-cpus
// (taskset), and runs itself (the readers, fio, dd, the PyTorch loader, the
// limit client, the local-disk reads) on --host-cpus. Every mount client
// runs in two placements:
//
//   - host: the daemon shares the host CPUs with the application, as on an
//     ordinary client host;
//   - offload: the daemon runs on the server's CPUs, the software form of
//     the OS2G design's DPU offload (ASPLOS 2025): the host keeps only its
//     own system calls and the kernel's FUSE work.
//
// Host CPU is the busy time of the host CPUs over a measured part, from
// the per-CPU lines of /proc/stat: everything that ran there (the
// application, the kernel on its behalf, a host-placement daemon, and any
// other load of the machine).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/os2g/os2g/internal/cpuset"
)

// allPlacements are the accepted --placements names, in report order.
var allPlacements = []string{"host", "offload"}

// baseClient is the client name of --os2g-base.
const baseClient = "os2g-base"

// runner is one column of the report: a client in a placement. Label is
// the client's name for the host placement (so the report's ratios to
// "os2g" keep meaning os2g on the host) and CLIENT-offload otherwise.
type runner struct {
	Label, Client, Placement string
}

// runners lists the runners of c in report order: each client in
// c.Clients order, mount clients once per placement, the others once.
func (c *config) runners() []runner {
	var out []runner
	for _, cl := range c.Clients {
		if !mountClients[cl] {
			out = append(out, runner{Label: cl, Client: cl, Placement: "host"})
			continue
		}
		for _, p := range c.Placements {
			r := runner{Label: cl, Client: cl, Placement: p}
			if p != "host" {
				r.Label = cl + "-" + p
			}
			out = append(out, r)
		}
	}
	return out
}

// labels returns the runners' labels.
func labels(rs []runner) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Label
	}
	return out
}

// withBase adds baseClient right after "os2g" (or first) when a baseline
// binary is given.
func withBase(clients []string, basePath string) []string {
	if basePath == "" || slices.Contains(clients, baseClient) {
		return clients
	}
	i := slices.Index(clients, "os2g") + 1
	return slices.Insert(slices.Clone(clients), i, baseClient)
}

// parseFences parses --server-cpus and --host-cpus. Both empty: no
// fencing. Otherwise both must be valid, online lists without a CPU in
// common.
func parseFences(server, host string) (srv, hst []int, err error) {
	if strings.TrimSpace(server) == "" && strings.TrimSpace(host) == "" {
		return nil, nil, nil
	}
	if srv, err = cpuset.Parse(server); err != nil {
		return nil, nil, fmt.Errorf("--server-cpus: %w", err)
	}
	if hst, err = cpuset.Parse(host); err != nil {
		return nil, nil, fmt.Errorf("--host-cpus: %w", err)
	}
	for _, c := range hst {
		if slices.Contains(srv, c) {
			return nil, nil, fmt.Errorf("--host-cpus %s and --server-cpus %s share CPU %d", cpuset.Format(hst), cpuset.Format(srv), c)
		}
	}
	if online, err := cpuset.Online(); err == nil {
		if err := cpuset.CheckUsable(append(slices.Clone(srv), hst...), online, "online"); err != nil {
			return nil, nil, fmt.Errorf("--server-cpus/--host-cpus: %w", err)
		}
	}
	return srv, hst, nil
}

// fenced reports whether the run fences the server and the host.
func (c *config) fenced() bool { return len(c.ServerCPUs) > 0 }

// daemonCPUs is the CPU list a daemon of placement runs on (nil: not
// fenced).
func (c *config) daemonCPUs(placement string) []int {
	if placement == "offload" {
		return c.ServerCPUs
	}
	return c.HostCPUs
}

// fencedCommand returns name and args run under "taskset -c cpus", or
// unchanged when cpus is empty.
func fencedCommand(cpus []int, name string, args ...string) (string, []string) {
	if len(cpus) == 0 {
		return name, args
	}
	return "taskset", append([]string{"-c", cpuset.Format(cpus), name}, args...)
}

// pinSelf pins this process (every thread; children inherit it) to the
// host CPUs.
func (c *config) pinSelf() error {
	if len(c.HostCPUs) == 0 {
		return nil
	}
	_, err := cpuset.Pin(c.HostCPUs)
	return err
}

// cpuTicks is the busy and total time of one CPU in /proc/stat, in
// USER_HZ ticks.
type cpuTicks struct {
	Busy, Total uint64
}

// parseCPUStat parses the per-CPU lines ("cpuN user nice system idle
// iowait irq softirq steal guest guest_nice") of /proc/stat. Busy is
// everything but idle and iowait; guest time is already in user and is
// not counted twice. The aggregate "cpu" line is skipped.
func parseCPUStat(data []byte) (map[int]cpuTicks, error) {
	out := map[int]cpuTicks{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			return nil, fmt.Errorf("/proc/stat: odd line %q", sc.Text())
		}
		if len(f) < 5 {
			return nil, fmt.Errorf("/proc/stat: short line %q", sc.Text())
		}
		var v [8]uint64
		for i := 0; i < 8 && i+1 < len(f); i++ {
			if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
				return nil, fmt.Errorf("/proc/stat: %q: %w", sc.Text(), err)
			}
		}
		idle := v[3] + v[4]
		total := v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]
		out[n] = cpuTicks{Busy: total - idle, Total: total}
	}
	if len(out) == 0 {
		return nil, errors.New("/proc/stat: no per-CPU lines")
	}
	return out, nil
}

// busySeconds is the busy time of cpus between two parses of /proc/stat,
// in seconds; NaN if a CPU is missing from either.
func busySeconds(before, after map[int]cpuTicks, cpus []int) float64 {
	var ticks uint64
	for _, c := range cpus {
		b, ok1 := before[c]
		a, ok2 := after[c]
		if !ok1 || !ok2 || a.Busy < b.Busy {
			return math.NaN()
		}
		ticks += a.Busy - b.Busy
	}
	return float64(ticks) / clockTicks
}

// hostMeter measures the busy time of the host CPUs over a measured part.
type hostMeter struct {
	cpus  []int
	start map[int]cpuTicks // nil: unknown
}

// startHostMeter snapshots the host CPUs (all online CPUs when the run is
// not fenced).
func (h *harness) startHostMeter() *hostMeter {
	cpus := h.cfg.HostCPUs
	if len(cpus) == 0 {
		cpus, _ = cpuset.Online()
	}
	m := &hostMeter{cpus: cpus}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		m.start, _ = parseCPUStat(b)
	}
	return m
}

// seconds is the host CPUs' busy time since startHostMeter; NaN unknown.
func (m *hostMeter) seconds() float64 {
	if m.start == nil {
		return math.NaN()
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return math.NaN()
	}
	now, err := parseCPUStat(b)
	if err != nil {
		return math.NaN()
	}
	return busySeconds(m.start, now, m.cpus)
}

// ddBytesRE matches the byte count of dd's summary line ("1073741824 bytes
// (1.1 GB, 1.0 GiB) copied, 1.9 s, 565 MB/s").
var ddBytesRE = regexp.MustCompile(`(?m)^(\d+) bytes .*copied`)

// parseDDBytes returns the bytes dd reports having copied.
func parseDDBytes(stderr string) (int64, error) {
	m := ddBytesRE.FindAllStringSubmatch(stderr, -1)
	if m == nil {
		return 0, fmt.Errorf("dd: no summary line in %q", lastLines(stderr, 3))
	}
	return strconv.ParseInt(m[len(m)-1][1], 10, 64)
}

// fsDD reads the large object under root with one "dd bs=1M" to
// /dev/null, as a user would type it.
func (h *harness) fsDD(ctx context.Context, root string, mt *meter) (sample, error) {
	path := root + "/" + seqKey
	start := time.Now()
	cmd := exec.CommandContext(ctx, "dd", "if="+path, "of=/dev/null", "bs=1M")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	secs := time.Since(start).Seconds()
	if err != nil {
		return sample{}, fmt.Errorf("dd: %w: %s", err, lastLines(stderr.String(), 3))
	}
	n, err := parseDDBytes(stderr.String())
	if err != nil {
		return sample{}, err
	}
	s := sample{Value: mibps(n, secs), MiBps: mibps(n, secs), Bytes: n, Seconds: secs, CPU: mt.cpu(), P50: math.NaN(), P99: math.NaN()}
	if n != h.man.Params.SeqSize {
		return s, fmt.Errorf("%w: dd read %d bytes of %s, want %d", errWrongBytes, n, path, h.man.Params.SeqSize)
	}
	return s, nil
}

// placementNote describes the fencing of a run for the report.
func placementNote(c *config) string {
	if !c.fenced() {
		return "placement: not fenced; the S3 server, the daemons and the readers share every CPU (host CPU = all CPUs)"
	}
	return fmt.Sprintf("placement: S3 server on CPU %s (a stand-in for a remote store); readers, loader, limit and local clients and `host` daemons on CPU %s; "+
		"`-offload` daemons on CPU %s beside the server. Host CPU = busy time of CPU %s from /proc/stat, i.e. everything that ran there (other load of the machine included)",
		cpuset.Format(c.ServerCPUs), cpuset.Format(c.HostCPUs), cpuset.Format(c.ServerCPUs), cpuset.Format(c.HostCPUs))
}
