//go:build !(linux && (amd64 || arm64))

package gdd

import (
	"fmt"
	"runtime"
)

// CUDA is the CUDA driver backend; on this platform it is never available.
type CUDA struct{ Sim }

// OpenCUDA reports ErrNoDevice: the CUDA backend needs linux/amd64 or
// linux/arm64.
func OpenCUDA(o CUDAOptions) (*CUDA, error) {
	return nil, fmt.Errorf("%w: the CUDA backend is built only for linux/amd64 and linux/arm64, not %s/%s", ErrNoDevice, runtime.GOOS, runtime.GOARCH)
}

// ExportIPC is unavailable on this platform.
func (d *CUDA) ExportIPC(b DeviceBuffer) ([]byte, error) { return nil, ErrNoDevice }

// WrapDevicePointer is unavailable on this platform.
func (d *CUDA) WrapDevicePointer(ptr uint64, size int64) (DeviceBuffer, error) {
	return nil, ErrNoDevice
}
