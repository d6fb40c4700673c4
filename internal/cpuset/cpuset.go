// Package cpuset parses Linux CPU lists ("0-3,6", the format of taskset -c,
// cgroup cpuset.cpus and /sys/devices/system/cpu/online) and pins a whole
// process to such a set.
//
// Pinning a Go process is not one call: sched_setaffinity(2) applies to one
// thread, and the runtime runs goroutines on many. Pin therefore sets the
// affinity of every thread listed in /proc/self/task and repeats the scan
// until a pass finds no thread it has not pinned; threads created later
// inherit the affinity of the thread that creates them (clone(2)), so the
// set holds for the life of the process. Calling Pin early, before the
// runtime has started many threads, keeps the passes short.
//
// The idea of keeping the storage client off the training cores, or on cores
// of its own, is the OS2G offload (ASPLOS 2025), done in software.
package cpuset

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxCPU bounds the CPU numbers Parse accepts: one past the highest CPU a
// unix.CPUSet (glibc's CPU_SETSIZE, 1024) can hold.
const MaxCPU = 1024

// ErrSyntax is wrapped by every error of Parse.
var ErrSyntax = errors.New("bad CPU list")

// Parse parses a CPU list: comma-separated CPU numbers and inclusive ranges
// "A-B" (A <= B), e.g. "2-3,6". It returns the CPUs sorted, without
// duplicates. Errors (wrapping ErrSyntax): an empty list or element, a
// number that is not a non-negative decimal below MaxCPU, a reversed range.
func Parse(s string) ([]int, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return nil, fmt.Errorf("%w: empty", ErrSyntax)
	}
	var out []int
	for part := range strings.SplitSeq(t, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseCPU(lo, s)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi, s); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("%w %q: range %q runs backwards", ErrSyntax, s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseCPU(v, list string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, fmt.Errorf("%w %q: empty element", ErrSyntax, list)
	}
	for _, r := range v {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%w %q: %q is not a CPU number", ErrSyntax, list, v)
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil || n >= MaxCPU {
		return 0, fmt.Errorf("%w %q: CPU %s is out of range (0-%d)", ErrSyntax, list, v, MaxCPU-1)
	}
	return n, nil
}

// Format renders cpus (any order, duplicates allowed) as a canonical list
// with ranges, e.g. []int{6,2,3} -> "2-3,6": the format of
// Cpus_allowed_list in /proc/PID/status. An empty set is "".
func Format(cpus []int) string {
	c := slices.Clone(cpus)
	slices.Sort(c)
	c = slices.Compact(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Online returns the CPUs the kernel has online, from
// /sys/devices/system/cpu/online.
func Online() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("cpuset: reading the online CPUs: %w", err)
	}
	return Parse(string(b))
}

// Allowed returns the CPUs this process may run on now (its scheduler
// affinity, which a cgroup cpuset or taskset may have narrowed).
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("cpuset: sched_getaffinity: %w", err)
	}
	var out []int
	for c := range MaxCPU {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// CheckUsable returns an error naming the CPUs of cpus that are not in
// usable (e.g. Online() or Allowed()); what names usable in the message
// ("online", "allowed").
func CheckUsable(cpus, usable []int, what string) error {
	var bad []int
	for _, c := range cpus {
		if !slices.Contains(usable, c) {
			bad = append(bad, c)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("CPU %s not %s (%s are)", Format(bad), what, Format(usable))
	}
	return nil
}

// Pin sets the scheduler affinity of every thread of this process to cpus
// (see the package doc). It returns the number of threads pinned. Errors:
// an empty set, a CPU of MaxCPU or more, and sched_setaffinity(2) failures
// other than a thread that exited meanwhile (ESRCH), e.g. EINVAL when no
// CPU of the set is usable under the process's cgroup.
func Pin(cpus []int) (int, error) {
	if len(cpus) == 0 {
		return 0, errors.New("cpuset: pin to an empty set")
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= MaxCPU {
			return 0, fmt.Errorf("cpuset: CPU %d out of range", c)
		}
		set.Set(c)
	}
	done := map[int]bool{}
	// A thread the runtime starts during a pass is created by an already
	// pinned thread or shows up in the next pass; the loop ends when a
	// whole pass finds nothing new. The bound only guards against a
	// runtime that keeps spawning threads forever.
	for pass := 0; pass < 100; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return len(done), fmt.Errorf("cpuset: listing threads: %w", err)
		}
		fresh := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue
				}
				return len(done), fmt.Errorf("cpuset: sched_setaffinity(%d, %s): %w", tid, Format(cpus), err)
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			return len(done), nil
		}
	}
	return len(done), errors.New("cpuset: threads kept appearing while pinning")
}
