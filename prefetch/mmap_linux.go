//go:build linux

package prefetch

import "syscall"

// mmapSupported says whether MmapAllocator maps memory on this system.
const mmapSupported = true

func pageSize() int { return syscall.Getpagesize() }

// mmapAnon maps n bytes of anonymous private memory (zeroed, not resident
// until touched).
func mmapAnon(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

func munmap(b []byte) error { return syscall.Munmap(b) }

// madviseDontNeed drops the pages of b (page-aligned): they read as zero
// and are not resident until touched again.
func madviseDontNeed(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return syscall.Madvise(b, syscall.MADV_DONTNEED)
}
