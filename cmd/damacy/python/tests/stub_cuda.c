/*
 * A stand-in libcuda.so.1 for the client's CUDA code paths on machines
 * without a GPU (tests/test_cuda_stub.py compiles it when a C compiler is
 * there). It implements the entry points the damacy package binds:
 *
 * - two devices; UUID bytes of device d are d*16 .. d*16+15;
 * - contexts: the primary context of device d is 0x1000+d; the current
 *   context is per thread, and every call that needs one fails with
 *   CUDA_ERROR_INVALID_CONTEXT (201) without it;
 * - "device memory" is host memory: an IPC memory handle is the text
 *   "memfd PID FD SIZE" (the fake server's slot), opened by mapping
 *   /proc/PID/fd/FD; cuMemcpyDtoH is memcpy; cuMemAlloc is malloc and
 *   cuMemcpyHtoDAsync memcpy (logged with its byte count and stream);
 *   cuMemHostRegister and cuMemHostUnregister only log (STUB_CUDA_FAIL_REGISTER
 *   set makes cuMemHostRegister fail);
 * - events and streams are counters; an event opened from an IPC handle
 *   remembers the handle's text ("ready 0", "done 1": the fake server's);
 * - STUB_CUDA_FAIL_OPEN=PREFIX makes cuIpcOpenEventHandle fail for handles
 *   whose text starts with PREFIX, and STUB_CUDA_FAIL_RECORD=PREFIX makes
 *   cuEventRecord fail on events opened from such handles (both read at
 *   each call, so a test may set them midway);
 * - STUB_CUDA_SYNC_DELAY_US=N makes cuEventSynchronize sleep N microseconds
 *   first, as if the work before the event took that long (read at each
 *   call);
 *
 * and appends one line per call to the file named by STUB_CUDA_LOG, for the
 * tests to check what was called, in which order, with which handles.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define OK 0
#define INVALID_VALUE 1
#define INVALID_DEVICE 101
#define INVALID_CONTEXT 201
#define NDEV 2

typedef struct { char reserved[64]; } ipc_handle;

/* handle_intact checks a handle from the fake server: its text, a NUL,
 * then 0x5A bytes to the end (see fake_server._handle). A client that
 * copies the handle as a C string loses the tail. */
static int handle_intact(const ipc_handle *h) {
    size_t n = strnlen(h->reserved, 64);
    for (size_t i = n + 1; i < 64; i++) {
        if ((unsigned char)h->reserved[i] != 0x5A) return 0;
    }
    return 1;
}

static __thread uintptr_t current;
static struct { uintptr_t event; char text[65]; } opened[256];
static int nopened;
static int refs[NDEV];
static uintptr_t next_event = 0x50000, next_stream = 0x60000;
static struct { uint64_t ptr; size_t size; } maps[64];

static void logf_(const char *fmt, ...) {
    const char *path = getenv("STUB_CUDA_LOG");
    if (!path) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    line[n] = '\n';
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
        if (write(fd, line, n + 1) < 0) {}
        close(fd);
    }
}

#define NEED_CONTEXT() do { if (!current) { logf_("%s: no current context", __func__); return INVALID_CONTEXT; } } while (0)

int cuInit(unsigned flags) { logf_("cuInit %u", flags); return OK; }

int cuGetErrorName(int r, const char **s) {
    *s = r == INVALID_CONTEXT ? "CUDA_ERROR_INVALID_CONTEXT" : "CUDA_ERROR_STUB";
    return OK;
}

int cuDeviceGetCount(int *n) { *n = NDEV; return OK; }

int cuDeviceGet(int *dev, int ordinal) {
    if (ordinal < 0 || ordinal >= NDEV) return INVALID_DEVICE;
    *dev = ordinal;
    return OK;
}

int cuDeviceGetUuid_v2(unsigned char *uuid, int dev) {
    for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(dev * 16 + i);
    return OK;
}

int cuCtxGetCurrent(uintptr_t *ctx) { *ctx = current; return OK; }

int cuCtxSetCurrent(uintptr_t ctx) { current = ctx; logf_("cuCtxSetCurrent 0x%lx", (unsigned long)ctx); return OK; }

int cuCtxGetDevice(int *dev) { NEED_CONTEXT(); *dev = (int)(current - 0x1000); return OK; }

int cuDevicePrimaryCtxRetain(uintptr_t *ctx, int dev) {
    if (dev < 0 || dev >= NDEV) return INVALID_DEVICE;
    refs[dev]++;
    *ctx = 0x1000 + dev;
    logf_("cuDevicePrimaryCtxRetain %d", dev);
    return OK;
}

int cuDevicePrimaryCtxRelease_v2(int dev) {
    refs[dev]--;
    logf_("cuDevicePrimaryCtxRelease_v2 %d refs=%d", dev, refs[dev]);
    return OK;
}

int cuIpcOpenMemHandle_v2(uint64_t *ptr, ipc_handle h, unsigned flags) {
    NEED_CONTEXT();
    int pid, fd;
    size_t size;
    char text[65];
    memcpy(text, h.reserved, 64);
    text[64] = 0;
    if (!handle_intact(&h) || sscanf(text, "memfd %d %d %zu", &pid, &fd, &size) != 3) return INVALID_VALUE;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
    int f = open(path, O_RDWR);
    if (f < 0) return INVALID_VALUE;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    close(f);
    if (p == MAP_FAILED) return INVALID_VALUE;
    for (int i = 0; i < 64; i++) {
        if (!maps[i].ptr) { maps[i].ptr = (uint64_t)(uintptr_t)p; maps[i].size = size; break; }
    }
    *ptr = (uint64_t)(uintptr_t)p;
    logf_("cuIpcOpenMemHandle_v2 %s flags=%u -> 0x%lx", text, flags, (unsigned long)*ptr);
    return OK;
}

int cuIpcCloseMemHandle(uint64_t ptr) {
    NEED_CONTEXT();
    for (int i = 0; i < 64; i++) {
        if (maps[i].ptr == ptr) {
            munmap((void *)(uintptr_t)ptr, maps[i].size);
            maps[i].ptr = 0;
            logf_("cuIpcCloseMemHandle 0x%lx", (unsigned long)ptr);
            return OK;
        }
    }
    return INVALID_VALUE;
}

/* fails reports whether the environment variable name holds a prefix of text. */
static int fails(const char *name, const char *text) {
    const char *prefix = getenv(name);
    return prefix && *prefix && strncmp(text, prefix, strlen(prefix)) == 0;
}

int cuIpcOpenEventHandle(uintptr_t *event, ipc_handle h) {
    NEED_CONTEXT();
    if (!handle_intact(&h)) return INVALID_VALUE;
    char text[65];
    memcpy(text, h.reserved, 64);
    text[64] = 0;
    if (fails("STUB_CUDA_FAIL_OPEN", text)) {
        logf_("cuIpcOpenEventHandle %s: failed as asked", text);
        return INVALID_VALUE;
    }
    *event = __sync_fetch_and_add(&next_event, 1);
    int i = __sync_fetch_and_add(&nopened, 1);
    if (i < 256) {
        opened[i].event = *event;
        memcpy(opened[i].text, text, sizeof text);
    }
    logf_("cuIpcOpenEventHandle %s -> 0x%lx", text, (unsigned long)*event);
    return OK;
}

int cuEventCreate(uintptr_t *event, unsigned flags) {
    NEED_CONTEXT();
    *event = __sync_fetch_and_add(&next_event, 1);
    logf_("cuEventCreate flags=%u -> 0x%lx", flags, (unsigned long)*event);
    return OK;
}

int cuEventRecord(uintptr_t event, uintptr_t stream) {
    NEED_CONTEXT();
    for (int i = 0; i < nopened && i < 256; i++) {
        if (opened[i].event == event && fails("STUB_CUDA_FAIL_RECORD", opened[i].text)) {
            logf_("cuEventRecord 0x%lx 0x%lx: failed as asked", (unsigned long)event, (unsigned long)stream);
            return INVALID_VALUE;
        }
    }
    logf_("cuEventRecord 0x%lx 0x%lx", (unsigned long)event, (unsigned long)stream);
    return OK;
}

int cuEventSynchronize(uintptr_t event) {
    NEED_CONTEXT();
    const char *delay = getenv("STUB_CUDA_SYNC_DELAY_US");
    if (delay) {
        usleep((useconds_t)atoi(delay));
    }
    logf_("cuEventSynchronize 0x%lx", (unsigned long)event);
    return OK;
}

int cuEventDestroy_v2(uintptr_t event) {
    NEED_CONTEXT();
    logf_("cuEventDestroy_v2 0x%lx", (unsigned long)event);
    return OK;
}

int cuStreamCreate(uintptr_t *stream, unsigned flags) {
    NEED_CONTEXT();
    *stream = __sync_fetch_and_add(&next_stream, 1);
    logf_("cuStreamCreate flags=%u -> 0x%lx", flags, (unsigned long)*stream);
    return OK;
}

int cuStreamDestroy_v2(uintptr_t stream) {
    NEED_CONTEXT();
    logf_("cuStreamDestroy_v2 0x%lx", (unsigned long)stream);
    return OK;
}

int cuStreamWaitEvent(uintptr_t stream, uintptr_t event, unsigned flags) {
    NEED_CONTEXT();
    logf_("cuStreamWaitEvent 0x%lx 0x%lx %u", (unsigned long)stream, (unsigned long)event, flags);
    return OK;
}

int cuStreamSynchronize(uintptr_t stream) {
    NEED_CONTEXT();
    logf_("cuStreamSynchronize 0x%lx", (unsigned long)stream);
    return OK;
}

int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) {
    NEED_CONTEXT();
    memcpy(dst, (void *)(uintptr_t)src, n);
    logf_("cuMemcpyDtoH_v2 %zu", n);
    return OK;
}

int cuMemAlloc_v2(uint64_t *ptr, size_t n) {
    NEED_CONTEXT();
    void *p = malloc(n);
    if (!p) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *ptr = (uint64_t)(uintptr_t)p;
    logf_("cuMemAlloc_v2 %zu -> 0x%lx", n, (unsigned long)*ptr);
    return OK;
}

int cuMemFree_v2(uint64_t ptr) {
    NEED_CONTEXT();
    free((void *)(uintptr_t)ptr);
    logf_("cuMemFree_v2 0x%lx", (unsigned long)ptr);
    return OK;
}

int cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
    NEED_CONTEXT();
    if (getenv("STUB_CUDA_FAIL_REGISTER")) {
        logf_("cuMemHostRegister_v2 0x%lx %zu %u: failed as asked", (unsigned long)(uintptr_t)p, n, flags);
        return INVALID_VALUE;
    }
    logf_("cuMemHostRegister_v2 0x%lx %zu %u", (unsigned long)(uintptr_t)p, n, flags);
    return OK;
}

int cuMemHostUnregister(void *p) {
    NEED_CONTEXT();
    logf_("cuMemHostUnregister 0x%lx", (unsigned long)(uintptr_t)p);
    return OK;
}

int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, uintptr_t stream) {
    NEED_CONTEXT();
    memcpy((void *)(uintptr_t)dst, src, n);
    logf_("cuMemcpyHtoDAsync_v2 %zu 0x%lx", n, (unsigned long)stream);
    return OK;
}
