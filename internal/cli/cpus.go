package cli

import (
	"fmt"
	"runtime"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/os2g/os2g/internal/cpuset"
)

// cpusFlag is --cpus LIST: the cores the daemon runs on. Set checks the
// list's syntax and that every CPU is online and allowed to this process,
// so a bad list fails at parse time (exit 2, naming the flag).
type cpusFlag struct {
	cpus []int // sorted; nil when the flag is not given
}

// cpusUsage is --cpus's help text.
const cpusUsage = "run the daemon only on these CPUs, e.g. 2-3,6 (scheduler affinity of all its threads, GOMAXPROCS to match); keeps it off the training cores or puts it where an offload engine would run (default: all the CPUs the process may use)"

func (c *cpusFlag) String() string { return cpuset.Format(c.cpus) }

// Set parses and checks a CPU list (see cpuset.Parse).
func (c *cpusFlag) Set(s string) error {
	cpus, err := cpuset.Parse(s)
	if err != nil {
		return err
	}
	if online, err := cpuset.Online(); err == nil {
		if err := cpuset.CheckUsable(cpus, online, "online"); err != nil {
			return err
		}
	}
	allowed, err := cpuset.Allowed()
	if err != nil {
		return err
	}
	if err := cpuset.CheckUsable(cpus, allowed, "allowed to this process"); err != nil {
		return err
	}
	c.cpus = cpus
	return nil
}

// apply pins every thread of this process to the list and sets GOMAXPROCS
// to its length; without --cpus it does nothing. Call it as early as the
// process knows its flags, so that few threads exist yet and later ones
// inherit the affinity.
func (c *cpusFlag) apply() error {
	if len(c.cpus) == 0 {
		return nil
	}
	if _, err := cpuset.Pin(c.cpus); err != nil {
		return fmt.Errorf("--cpus %s: %w", cpuset.Format(c.cpus), err)
	}
	runtime.GOMAXPROCS(len(c.cpus))
	return nil
}

// processCPUSeconds is the CPU time (user + system, seconds) this process
// has used, from getrusage(RUSAGE_SELF); NaN-free: 0 if the call fails.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// newCPUCounter is os2g_cpu_seconds_total, the daemon's CPU time; os2g
// stats divides it by the bytes read and the files opened.
func newCPUCounter() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "os2g", Name: "cpu_seconds_total",
		Help: "CPU time (user + system) of the daemon process, seconds, from getrusage.",
	}, processCPUSeconds)
}

// Type names the value in help ("--cpus list").
func (c *cpusFlag) Type() string { return "list" }
