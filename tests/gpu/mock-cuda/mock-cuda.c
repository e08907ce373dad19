/* SPDX-License-Identifier: MIT */
/*
 * A CPU stand-in for libcuda.so.1, for the dry run of device-check.sh on
 * machines without a GPU: it implements just the Driver API entry points
 * the uma plugin and uma-gpu-check call, so that the check programs run
 * end to end (sender, pool, blocking, wire pause, parameter passing,
 * result checks) with "device" memory in host memory and the two kernels
 * run by the CPU. It proves the programs' logic, not CUDA: nothing here
 * says the real driver, the PTX or managed memory behave. Never installed;
 * used only through LD_LIBRARY_PATH by device-check.sh --dry-run.
 *
 * Device memory is 2 GiB of make-believe: cuMemAlloc maps address space
 * without reserving it, so occupying "all" of it costs nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3,
       INVALID_IMAGE = 200, NOT_FOUND = 500 };

static const uint64_t mock_total = 2ull << 30;
static uint64_t mock_used; /* cuMemAlloc'd bytes; one thread calls */
static int inited;

struct mock_alloc {
	void *p;
	size_t len;
	struct mock_alloc *next;
};
static struct mock_alloc *device_allocs;

EXPORT CUresult cuInit(unsigned flags);
CUresult cuInit(unsigned flags)
{
	inited = 1;
	return flags ? INVALID_VALUE : OK;
}

EXPORT CUresult cuDriverGetVersion(int *v);
CUresult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return OK;
}

EXPORT CUresult cuDeviceGetCount(int *n);
CUresult cuDeviceGetCount(int *n)
{
	*n = inited ? 1 : 0;
	return inited ? OK : NOT_INITIALIZED;
}

EXPORT CUresult cuDeviceGet(int *d, int ordinal);
CUresult cuDeviceGet(int *d, int ordinal)
{
	*d = ordinal;
	return ordinal == 0 ? OK : INVALID_VALUE;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, int d);
CUresult cuDeviceGetName(char *name, int len, int d)
{
	snprintf(name, (size_t)len, "mock GPU (CPU stand-in, not CUDA)");
	return OK;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int d);
CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
	switch (attr) {
	case 16: /* MULTIPROCESSOR_COUNT */
		*v = 2;
		break;
	case 83: /* MANAGED_MEMORY */
	case 89: /* CONCURRENT_MANAGED_ACCESS */
		*v = 1;
		break;
	default:
		*v = 0;
	}
	return OK;
}

EXPORT CUresult cuGetErrorName(CUresult r, const char **name);
CUresult cuGetErrorName(CUresult r, const char **name)
{
	*name = r == OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY (mock)" :
		r == NOT_FOUND	   ? "CUDA_ERROR_NOT_FOUND (mock)" :
				     "CUDA_ERROR (mock)";
	return OK;
}

static int ctx_token;

EXPORT CUresult cuDevicePrimaryCtxRetain(void **c, int d);
CUresult cuDevicePrimaryCtxRetain(void **c, int d)
{
	*c = &ctx_token;
	return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int d);
CUresult cuDevicePrimaryCtxRelease_v2(int d)
{
	return OK;
}

EXPORT CUresult cuCtxPushCurrent_v2(void *c);
CUresult cuCtxPushCurrent_v2(void *c)
{
	return c == &ctx_token ? OK : INVALID_VALUE;
}

EXPORT CUresult cuCtxPopCurrent_v2(void **c);
CUresult cuCtxPopCurrent_v2(void **c)
{
	*c = &ctx_token;
	return OK;
}

EXPORT CUresult cuCtxSynchronize(void);
CUresult cuCtxSynchronize(void)
{
	return OK;
}

EXPORT CUresult cuMemAllocManaged(uint64_t *p, size_t len, unsigned flags);
CUresult cuMemAllocManaged(uint64_t *p, size_t len, unsigned flags)
{
	void *m = malloc(len ? len : 1);

	*p = (uint64_t)(uintptr_t)m;
	return m ? OK : OUT_OF_MEMORY;
}

EXPORT CUresult cuMemAlloc_v2(uint64_t *p, size_t len);
CUresult cuMemAlloc_v2(uint64_t *p, size_t len)
{
	struct mock_alloc *a;
	void *m;

	if (mock_used + len > mock_total)
		return OUT_OF_MEMORY;
	a = malloc(sizeof(*a));
	m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (!a || m == MAP_FAILED) {
		free(a);
		return OUT_OF_MEMORY;
	}
	*a = (struct mock_alloc){ m, len, device_allocs };
	device_allocs = a;
	mock_used += len;
	*p = (uint64_t)(uintptr_t)m;
	return OK;
}

EXPORT CUresult cuMemFree_v2(uint64_t p);
CUresult cuMemFree_v2(uint64_t p)
{
	for (struct mock_alloc **pp = &device_allocs; *pp; pp = &(*pp)->next)
		if ((*pp)->p == (void *)(uintptr_t)p) {
			struct mock_alloc *a = *pp;

			*pp = a->next;
			mock_used -= a->len;
			munmap(a->p, a->len);
			free(a);
			return OK;
		}
	free((void *)(uintptr_t)p); /* managed */
	return OK;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *fr, size_t *total);
CUresult cuMemGetInfo_v2(size_t *fr, size_t *total)
{
	*fr = mock_total - mock_used;
	*total = mock_total;
	return OK;
}

EXPORT CUresult cuMemsetD8_v2(uint64_t p, unsigned char v, size_t n);
CUresult cuMemsetD8_v2(uint64_t p, unsigned char v, size_t n)
{
	memset((void *)(uintptr_t)p, v, n);
	return OK;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n)
{
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return OK;
}

/* ---- modules and kernels: the two PTX entries, run on the CPU ---------- */

static void k_csum(uint64_t data, uint64_t n, uint64_t out)
{
	const uint64_t *w = (const uint64_t *)(uintptr_t)data;
	uint64_t s = 0;

	for (uint64_t i = 0; i < n; i++)
		s += w[i] * (2 * i + 1);
	*(uint64_t *)(uintptr_t)out += s;
}

static void k_read(uint64_t data, uint64_t n16, uint64_t out)
{
	const uint64_t *w = (const uint64_t *)(uintptr_t)data;
	uint64_t s = 0;

	for (uint64_t i = 0; i < 2 * n16; i++)
		s += w[i];
	*(uint64_t *)(uintptr_t)out += s;
}

struct mock_kernel {
	const char *name;
	void (*fn)(uint64_t data, uint64_t n, uint64_t out);
};
static const struct mock_kernel kernels[] = { { "zap_csum", k_csum }, { "zap_read", k_read } };
static int module_token;

EXPORT CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n,
				   int *opts, void **vals);
CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *opts,
			    void **vals)
{
	/* The PTX must at least declare both entries. */
	if (!strstr(image, ".entry zap_csum(") || !strstr(image, ".entry zap_read("))
		return INVALID_IMAGE;
	*m = &module_token;
	return OK;
}

EXPORT CUresult cuModuleGetFunction(void **f, void *m, const char *name);
CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
	for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++)
		if (m == &module_token && !strcmp(name, kernels[i].name)) {
			*f = (void *)&kernels[i];
			return OK;
		}
	return NOT_FOUND;
}

EXPORT CUresult cuModuleUnload(void *m);
CUresult cuModuleUnload(void *m)
{
	return OK;
}

EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
			       unsigned bx, unsigned by, unsigned bz, unsigned shmem,
			       void *stream, void **params, void **extra);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
			unsigned bx, unsigned by, unsigned bz, unsigned shmem,
			void *stream, void **params, void **extra)
{
	const struct mock_kernel *k = f;

	if (!gx || !bx || bx > 1024 || !params || extra)
		return INVALID_VALUE;
	/* Each parameter is passed by address (.param .u64 in the PTX). */
	k->fn(*(uint64_t *)params[0], *(uint64_t *)params[1], *(uint64_t *)params[2]);
	return OK;
}

EXPORT CUresult cuEventCreate(void **e, unsigned flags);
CUresult cuEventCreate(void **e, unsigned flags)
{
	*e = calloc(1, sizeof(struct timespec));
	return *e ? OK : OUT_OF_MEMORY;
}

EXPORT CUresult cuEventRecord(void *e, void *stream);
CUresult cuEventRecord(void *e, void *stream)
{
	clock_gettime(CLOCK_MONOTONIC, e);
	return OK;
}

EXPORT CUresult cuEventSynchronize(void *e);
CUresult cuEventSynchronize(void *e)
{
	return OK;
}

EXPORT CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b);
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b)
{
	const struct timespec *x = a, *y = b;

	*ms = (float)((y->tv_sec - x->tv_sec) * 1e3 + (y->tv_nsec - x->tv_nsec) / 1e6);
	if (*ms <= 0)
		*ms = 1e-3f;
	return OK;
}

EXPORT CUresult cuEventDestroy_v2(void *e);
CUresult cuEventDestroy_v2(void *e)
{
	free(e);
	return OK;
}
