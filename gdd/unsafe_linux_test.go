//go:build linux && (amd64 || arm64)

package gdd

import "unsafe"

// unsafePointer converts a C address from dlsym (memory Go never moves or
// frees) to a pointer.
func unsafePointer(addr uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr))
}
