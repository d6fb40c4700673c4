//go:build linux

package prefetch

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentPages returns how many pages of the mapping that holds b (from
// its start, over n bytes, page-aligned) are resident, by mincore(2).
func residentPages(t *testing.T, b []byte, n int) int {
	t.Helper()
	full := unsafe.Slice(unsafe.SliceData(b), n)
	vec := make([]byte, (n+unix.Getpagesize()-1)/unix.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&full[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	k := 0
	for _, v := range vec {
		k += int(v & 1)
	}
	return k
}

// TestMmapAllocatorPopulates: a fresh mapping's pages under the requested
// length are resident as Alloc returns (one MADV_POPULATE_WRITE instead of
// a fault per page), the rest of its power-of-two class is not, and a
// reused buffer grown into a longer length gets its new pages too.
func TestMmapAllocatorPopulates(t *testing.T) {
	probe, err := mmapAnon(unix.Getpagesize())
	if err != nil {
		t.Fatal(err)
	}
	perr := populate(probe)
	munmap(probe)
	if errors.Is(perr, unix.EINVAL) {
		t.Skip("kernel without MADV_POPULATE_WRITE (Linux < 5.14)")
	}
	if perr != nil {
		t.Fatalf("populate: %v", perr)
	}
	page := unix.Getpagesize()
	a := newMmap(t, MmapOptions{MaxIdle: 4 * mib})
	n := 110 << 10 // a 128 KiB class
	b := a.Alloc(n)
	need := (n + page - 1) / page
	if got := residentPages(t, b, 128<<10); got != need {
		t.Fatalf("fresh %d-byte buffer: %d pages resident, want %d of its 128 KiB class", n, got, need)
	}
	a.Free(b)
	// Reuse with a shorter length, then a longer one: the pages up to the
	// longer length are resident again after the second Alloc.
	b = a.Alloc(70 << 10)
	if got := residentPages(t, b, 128<<10); got != (70<<10+page-1)/page {
		t.Fatalf("reused at 70 KiB: %d pages resident", got)
	}
	a.Free(b)
	b = a.Alloc(120 << 10)
	if got := residentPages(t, b, 128<<10); got != (120<<10+page-1)/page {
		t.Fatalf("reused at 120 KiB: %d pages resident", got)
	}
	if st := a.Stats(); st.Maps != 1 || st.Reuses != 2 {
		t.Fatalf("stats %+v, want 1 map and 2 reuses", st)
	}
	a.Free(b)
}
