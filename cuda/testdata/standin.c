/*
 * C stand-ins with the prototypes of the driver entry points whose
 * arguments purego must pass in a non-trivial way: cuLaunchKernel (11
 * arguments, a void** of parameters), cuIpcOpenMemHandle_v2 and
 * cuIpcOpenEventHandle (64-byte structs by value). They record what
 * arrived; abi_test.go compares.
 */
#include <stdint.h>
#include <string.h>

typedef struct CUipcMemHandle_st { char reserved[64]; } CUipcMemHandle;

static unsigned char got_handle[64];
static unsigned got_flags;

int cuIpcOpenMemHandle_v2(unsigned long long *pdptr, CUipcMemHandle handle, unsigned int flags) {
	memcpy(got_handle, handle.reserved, 64);
	got_flags = flags;
	*pdptr = 0xabcdef0123ULL;
	return 0;
}

void standin_ipc(unsigned char *handle, unsigned *flags) {
	memcpy(handle, got_handle, 64);
	*flags = got_flags;
}

typedef struct CUipcEventHandle_st { char reserved[64]; } CUipcEventHandle;

static unsigned char got_event_handle[64];

int cuIpcOpenEventHandle(void **phEvent, CUipcEventHandle handle) {
	memcpy(got_event_handle, handle.reserved, 64);
	*phEvent = (void *)0x5eed0e7e17ULL;
	return 0;
}

void standin_ipc_event(unsigned char *handle) {
	memcpy(handle, got_event_handle, 64);
}

static unsigned sizes[64];
static int nsizes;
static unsigned char params[4096];
static unsigned dims[7];
static uintptr_t got_f, got_stream, got_extra;

void standin_set_sizes(const unsigned *s, int n) {
	memcpy(sizes, s, n * sizeof *s);
	nsizes = n;
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **kernelParams, void **extra) {
	size_t off = 0;
	got_f = (uintptr_t)f;
	got_stream = (uintptr_t)stream;
	got_extra = (uintptr_t)extra;
	dims[0] = gx; dims[1] = gy; dims[2] = gz;
	dims[3] = bx; dims[4] = by; dims[5] = bz;
	dims[6] = shared;
	for (int i = 0; i < nsizes; i++) {
		memcpy(params + off, kernelParams[i], sizes[i]);
		off += sizes[i];
	}
	return 0;
}

void standin_launch(unsigned char *p, unsigned *d, uintptr_t *f, uintptr_t *stream, uintptr_t *extra) {
	memcpy(p, params, sizeof params);
	memcpy(d, dims, sizeof dims);
	*f = got_f;
	*stream = got_stream;
	*extra = got_extra;
}
