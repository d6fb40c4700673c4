package fusefs

import (
	"bytes"
	"context"
	"os"
	"strconv"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// callerPid is the thread id of the process that caused the request (0
// for the kernel or when unknown).
func callerPid(ctx context.Context) uint32 {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Pid
	}
	return 0
}

// tgidOf returns the process (thread group) id of thread tid, 0 if it
// cannot be read.
func tgidOf(tid uint32) int {
	if tid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(b, []byte("\nTgid:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	v, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil {
		return 0
	}
	return v
}

// otherWriteFD reports whether process tgid still has a descriptor open
// for writing on the file at path (as /proc/<tgid>/fd links show it). A
// close(2) removes the descriptor before FLUSH is sent, so a hit means the
// FLUSH came from a dup'd copy (dd and shell redirections open, dup2 and
// close before writing) and the upload must go on.
func otherWriteFD(tgid int, path string) bool {
	if tgid <= 0 || path == "" {
		return false
	}
	dir := "/proc/" + strconv.Itoa(tgid) + "/fd/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if link, err := os.Readlink(dir + e.Name()); err != nil || link != path {
			continue
		}
		info, err := os.ReadFile("/proc/" + strconv.Itoa(tgid) + "/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		_, rest, ok := bytes.Cut(info, []byte("flags:"))
		if !ok {
			continue
		}
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		flags, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 8, 64)
		if err == nil && flags&3 != 0 { // O_WRONLY or O_RDWR
			return true
		}
	}
	return false
}

// pfExiting is the kernel's PF_EXITING task flag.
const pfExiting = 0x4

// killedBySignal reports whether thread tid is exiting because a signal
// killed it (kill -9, SIGSEGV, ...), from /proc/<tid>/stat: the flags
// field (9) has PF_EXITING and the exit_code field (52) carries a signal
// number. The kernel closes a killed process's files, which sends FLUSH;
// such a FLUSH must abort an upload instead of committing a partial
// object. Without permission to read exit_code (not root) it reads 0 and
// this reports false.
func killedBySignal(tid uint32) bool {
	if tid == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 50 {
		return false
	}
	flags, err1 := strconv.ParseUint(string(f[6]), 10, 64)
	code, err2 := strconv.ParseInt(string(f[49]), 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return flags&pfExiting != 0 && code&0x7f != 0
}
