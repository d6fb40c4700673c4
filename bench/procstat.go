package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/os2g/os2g/internal/mountinfo"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/PID/stat. Linux
// fixes it at 100 on every architecture Go supports.
const clockTicks = 100

// procCPU is the CPU time a process has used, in seconds (utime+stime).
type procCPU struct {
	User, System float64 // seconds
}

// Total is user plus system time in seconds.
func (c procCPU) Total() float64 { return c.User + c.System }

// parseProcStat parses the content of /proc/PID/stat and returns utime and
// stime (fields 14 and 15) in seconds. The command name (field 2) is in
// parentheses and may itself contain spaces and parentheses, so parsing
// starts after the last ')'.
func parseProcStat(data []byte) (procCPU, error) {
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return procCPU{}, errors.New("procstat: no ')' in stat line")
	}
	fields := strings.Fields(string(data[end+1:]))
	// fields[0] is field 3 (state); utime is field 14 -> fields[11].
	if len(fields) < 13 {
		return procCPU{}, fmt.Errorf("procstat: only %d fields after comm", len(fields))
	}
	ut, err := strconv.ParseUint(fields[11], 10, 64)
	if err != nil {
		return procCPU{}, fmt.Errorf("procstat: utime %q: %w", fields[11], err)
	}
	st, err := strconv.ParseUint(fields[12], 10, 64)
	if err != nil {
		return procCPU{}, fmt.Errorf("procstat: stime %q: %w", fields[12], err)
	}
	return procCPU{User: float64(ut) / clockTicks, System: float64(st) / clockTicks}, nil
}

// parseProcStatState returns the one-letter state (field 3) of a stat line.
func parseProcStatState(data []byte) string {
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return ""
	}
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

// parseVmHWM returns the VmHWM line of /proc/PID/status (peak resident set
// size over the process lifetime) in bytes.
func parseVmHWM(data []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("procstat: odd VmHWM line %q", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procstat: VmHWM %q: %w", line, err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("procstat: no VmHWM line")
}

// readProcCPU reads the CPU time of process pid.
func readProcCPU(pid int) (procCPU, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procCPU{}, err
	}
	return parseProcStat(b)
}

// readProcHWM reads the peak RSS of process pid in bytes.
func readProcHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmHWM(b)
}

// selfCPU is this process's own CPU time (getrusage RUSAGE_SELF), used for
// the in-process "limit" client.
func selfCPU() procCPU {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return procCPU{}
	}
	return procCPU{
		User:   float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6,
		System: float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6,
	}
}

// splitCmdline splits a /proc/PID/cmdline blob into its NUL-separated args.
func splitCmdline(b []byte) []string {
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(b), "\x00")
}

// findDaemonPID scans /proc for the live process (not this one, not a
// zombie) whose command line has mountpoint as one argument and whose
// argv[0] base name contains exeHint. When several match (a daemon that
// forked), the newest (highest start time) wins. It returns 0 if none.
func findDaemonPID(mountpoint, exeHint string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	best, bestStart := 0, uint64(0)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := splitCmdline(cmd)
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), exeHint) {
			continue
		}
		hit := false
		for _, a := range args[1:] {
			if a == mountpoint || strings.TrimRight(a, "/") == mountpoint {
				hit = true
				break
			}
		}
		if !hit {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || parseProcStatState(st) == "Z" {
			continue
		}
		start := parseStartTime(st)
		if best == 0 || start > bestStart {
			best, bestStart = pid, start
		}
	}
	return best
}

// parseStartTime returns field 22 (starttime, clock ticks since boot) of a
// stat line, 0 if absent.
func parseStartTime(data []byte) uint64 {
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0
	}
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(fields[19], 10, 64)
	return v
}

// isMounted reports whether mountpoint is the target of a mount in
// /proc/self/mountinfo.
func isMounted(mountpoint string) bool {
	_, ok := mountinfo.At(mountinfo.Self(), mountpoint)
	return ok
}

// mountinfoHas reports whether a mountinfo table b lists mountpoint as a
// mount's target.
func mountinfoHas(b []byte, mountpoint string) bool {
	ms, _ := mountinfo.Parse(bytes.NewReader(b))
	_, ok := mountinfo.At(ms, mountpoint)
	return ok
}

// dropCaches writes back dirty pages and drops the page, dentry and inode
// caches (echo 3 > /proc/sys/vm/drop_caches). It needs root.
func dropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
