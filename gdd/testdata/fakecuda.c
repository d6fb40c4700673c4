/*
 * fakecuda.c: a stand-in for libcuda.so.1 with the subset of the CUDA driver
 * API that gdd's CUDA backend binds, over host memory. Tests build it with
 * `cc -shared -fPIC` and open it through CUDAOptions.Library, so the purego
 * bindings (symbol names, argument order, the 64-byte CUipcMemHandle passed
 * by value) are exercised on machines without a GPU. Prototypes follow
 * cuda.h (CUDA 11/12); CUresult is an int enum, CUdeviceptr a 64-bit
 * integer, handles are pointers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef struct { char reserved[64]; } CUipcMemHandle;

enum {
    OK = 0,
    INVALID_VALUE = 1,
    NOT_INITIALIZED = 3,
    INVALID_CONTEXT = 201,
    INVALID_HANDLE = 400,
};

static int inited;
static int ctx_token = 42;
static __thread void *current;

#define MAXALLOC 1024
static struct { CUdeviceptr p; size_t n; } allocs[MAXALLOC];

/* Counters a test may read with dlsym. */
long fake_h2d_calls, fake_h2d_bytes, fake_ipc_opens;
long fake_d2h_calls, fake_d2h_bytes;

static int need_ctx(void) {
    if (!inited) return NOT_INITIALIZED;
    if (current != &ctx_token) return INVALID_CONTEXT;
    return OK;
}

CUresult cuInit(unsigned int flags) { if (flags) return INVALID_VALUE; inited = 1; return OK; }
CUresult cuDeviceGetCount(int *n) { if (!inited) return NOT_INITIALIZED; *n = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { if (ordinal != 0) return 101; *d = 0; return OK; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { strncpy(name, "Fake CUDA Device", len); name[len - 1] = 0; return OK; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = &ctx_token; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return OK; }
CUresult cuCtxSetCurrent(CUcontext c) { current = c; return OK; }

CUresult cuMemAllocHost_v2(void **pp, size_t n) { int r = need_ctx(); if (r) return r; *pp = calloc(1, n); return *pp ? OK : 2; }
CUresult cuMemFreeHost(void *p) { int r = need_ctx(); if (r) return r; free(p); return OK; }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags) { return need_ctx(); }
CUresult cuMemHostUnregister(void *p) { return need_ctx(); }

CUresult cuMemAlloc_v2(CUdeviceptr *dp, size_t n) {
    int r = need_ctx(); if (r) return r;
    for (int i = 0; i < MAXALLOC; i++) {
        if (!allocs[i].p) {
            void *m = calloc(1, n);
            if (!m) return 2;
            allocs[i].p = (CUdeviceptr)(uintptr_t)m;
            allocs[i].n = n;
            *dp = allocs[i].p;
            return OK;
        }
    }
    return 2;
}

static int find(CUdeviceptr p) {
    for (int i = 0; i < MAXALLOC; i++)
        if (allocs[i].p && p >= allocs[i].p && p < allocs[i].p + allocs[i].n) return i;
    return -1;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    int r = need_ctx(); if (r) return r;
    int i = find(p);
    if (i < 0 || allocs[i].p != p) return INVALID_VALUE;
    free((void *)(uintptr_t)p);
    allocs[i].p = 0;
    return OK;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    int r = need_ctx(); if (r) return r;
    int i = find(p);
    if (i < 0) return INVALID_VALUE;
    if (base) *base = allocs[i].p;
    if (size) *size = allocs[i].n;
    return OK;
}

static int in_range(CUdeviceptr p, size_t n) {
    int i = find(p);
    return i >= 0 && p + n <= allocs[i].p + allocs[i].n;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    int r = need_ctx(); if (r) return r;
    if (!s || *(int *)s != 0x5354) return INVALID_HANDLE;
    if (!in_range(dst, n)) return INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, n);
    fake_h2d_calls++;
    fake_h2d_bytes += n;
    return OK;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    int r = need_ctx(); if (r) return r;
    if (!s || *(int *)s != 0x5354) return INVALID_HANDLE;
    if (!in_range(src, n)) return INVALID_VALUE;
    memcpy(dst, (void *)(uintptr_t)src, n);
    fake_d2h_calls++;
    fake_d2h_bytes += n;
    return OK;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    int r = need_ctx(); if (r) return r;
    if (!in_range(src, n)) return INVALID_VALUE;
    memcpy(dst, (void *)(uintptr_t)src, n);
    return OK;
}

CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    int r = need_ctx(); if (r) return r;
    if (flags != 1) return INVALID_VALUE; /* gdd asks for CU_STREAM_NON_BLOCKING */
    int *m = malloc(sizeof(int)); *m = 0x5354; *s = m; return OK;
}
CUresult cuStreamSynchronize(CUstream s) { int r = need_ctx(); if (r) return r; return s && *(int *)s == 0x5354 ? OK : INVALID_HANDLE; }
CUresult cuStreamDestroy_v2(CUstream s) { int r = need_ctx(); if (r) return r; free(s); return OK; }
CUresult cuEventCreate(CUevent *e, unsigned int flags) { int r = need_ctx(); if (r) return r; int *m = malloc(sizeof(int)); *m = 0x4556; *e = m; return OK; }
CUresult cuEventRecord(CUevent e, CUstream s) {
    int r = need_ctx(); if (r) return r;
    if (!e || *(int *)e != 0x4556 || !s || *(int *)s != 0x5354) return INVALID_HANDLE;
    return OK;
}
CUresult cuEventSynchronize(CUevent e) { int r = need_ctx(); if (r) return r; return e && *(int *)e == 0x4556 ? OK : INVALID_HANDLE; }
CUresult cuEventDestroy_v2(CUevent e) { int r = need_ctx(); if (r) return r; free(e); return OK; }

/* An IPC handle: every byte is a function of its index and the pointer, so
 * a handle that arrives shifted or truncated is refused. */
static void fill_handle(CUipcMemHandle *h, CUdeviceptr p) {
    memcpy(h->reserved, &p, 8);
    for (int i = 8; i < 64; i++) h->reserved[i] = (char)(i * 37 + (int)(p & 0xff));
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    int r = need_ctx(); if (r) return r;
    int i = find(p);
    if (i < 0 || allocs[i].p != p) return INVALID_VALUE;
    fill_handle(h, p);
    return OK;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dp, CUipcMemHandle h, unsigned int flags) {
    int r = need_ctx(); if (r) return r;
    if (flags != 1) return INVALID_VALUE; /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
    CUdeviceptr p;
    memcpy(&p, h.reserved, 8);
    CUipcMemHandle want;
    fill_handle(&want, p);
    if (memcmp(&want, &h, 64) != 0 || find(p) < 0) return INVALID_HANDLE;
    fake_ipc_opens++;
    *dp = p;
    return OK;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) { int r = need_ctx(); if (r) return r; return find(p) >= 0 ? OK : INVALID_VALUE; }

CUresult cuGetErrorName(CUresult e, const char **s) {
    switch (e) {
    case OK: *s = "CUDA_SUCCESS"; return OK;
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; return OK;
    case INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; return OK;
    }
    *s = "CUDA_ERROR_UNKNOWN";
    return OK;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
    switch (e) {
    case INVALID_HANDLE: *s = "invalid resource handle"; return OK;
    case INVALID_CONTEXT: *s = "invalid device context"; return OK;
    }
    *s = "fake driver error";
    return OK;
}
