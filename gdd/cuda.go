package gdd

import "log/slog"

// CUDAOptions configures the CUDA backend.
type CUDAOptions struct {
	// Ordinal is the CUDA device index as this process sees it (after
	// CUDA_VISIBLE_DEVICES).
	Ordinal int
	// Library is the driver library to dlopen ("" means "libcuda.so.1").
	Library string
	// Logger receives one line when the device opens (nil: discarded).
	Logger *slog.Logger
}

// IPCHandleSize is the size of a CUDA IPC memory handle (CU_IPC_HANDLE_SIZE,
// sizeof(cudaIpcMemHandle_t)) in bytes.
const IPCHandleSize = 64
