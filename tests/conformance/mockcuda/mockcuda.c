/* SPDX-License-Identifier: MIT */
/*
 * A test double of the CUDA Driver API for the conformance suite's uma
 * instance: the entry points util/cuda/zap-cuda.c resolves from
 * libcuda.so.1 (its required list; the optional ones are left out, which
 * the loader allows), backed by host memory. One device, with managed
 * memory that the CPU and the "GPU" share (it is plain host memory).
 * Built as libcuda.so.1 in a directory of its own, which the test puts on
 * LD_LIBRARY_PATH; never installed.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MOCK_EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;

enum {
	OK = 0,
	INVALID_VALUE = 1,
	OUT_OF_MEMORY = 2,
	INVALID_DEVICE = 101,
};

/* The prototypes, as cuda.h would give them (-Wmissing-prototypes). */
CUresult cuInit(unsigned flags);
CUresult cuDriverGetVersion(int *v);
CUresult cuDeviceGetCount(int *n);
CUresult cuDeviceGet(CUdevice *d, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice d);
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d);
CUresult cuGetErrorName(CUresult r, const char **name);
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d);
CUresult cuCtxPushCurrent_v2(CUcontext c);
CUresult cuCtxPopCurrent_v2(CUcontext *c);
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t len, unsigned flags);
CUresult cuMemFree_v2(CUdeviceptr p);

/* A context handle is only compared and passed back. */
static int primary_ctx;

MOCK_EXPORT CUresult cuInit(unsigned flags)
{
	return flags ? INVALID_VALUE : OK;
}

MOCK_EXPORT CUresult cuDriverGetVersion(int *v)
{
	if (!v)
		return INVALID_VALUE;
	*v = 12000;
	return OK;
}

MOCK_EXPORT CUresult cuDeviceGetCount(int *n)
{
	if (!n)
		return INVALID_VALUE;
	*n = 1;
	return OK;
}

MOCK_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	if (!d)
		return INVALID_VALUE;
	if (ordinal != 0)
		return INVALID_DEVICE;
	*d = 0;
	return OK;
}

MOCK_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	if (!name || len < 1 || d != 0)
		return d != 0 ? INVALID_DEVICE : INVALID_VALUE;
	strncpy(name, "zap conformance mock device", (size_t)len - 1);
	name[len - 1] = '\0';
	return OK;
}

MOCK_EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	if (!v)
		return INVALID_VALUE;
	if (d != 0)
		return INVALID_DEVICE;
	switch (attr) {
	case 83: /* MANAGED_MEMORY */
	case 89: /* CONCURRENT_MANAGED_ACCESS */
	case 88: /* PAGEABLE_MEMORY_ACCESS */
	case 100: /* PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES */
		*v = 1;
		break;
	default:
		*v = 0;
	}
	return OK;
}

MOCK_EXPORT CUresult cuGetErrorName(CUresult r, const char **name)
{
	if (!name)
		return INVALID_VALUE;
	switch (r) {
	case OK: *name = "CUDA_SUCCESS"; break;
	case INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
	case OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
	default: return INVALID_VALUE;
	}
	return OK;
}

MOCK_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	if (!c)
		return INVALID_VALUE;
	if (d != 0)
		return INVALID_DEVICE;
	*c = &primary_ctx;
	return OK;
}

MOCK_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	return d != 0 ? INVALID_DEVICE : OK;
}

MOCK_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	return c == &primary_ctx ? OK : INVALID_VALUE;
}

MOCK_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
	if (c)
		*c = &primary_ctx;
	return OK;
}

/* Managed memory is host memory here: 256-byte aligned, as the driver's. */
MOCK_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t len, unsigned flags)
{
	void *m = NULL;

	if (!p || !len || (flags != 0x1 && flags != 0x2))
		return INVALID_VALUE;
	if (posix_memalign(&m, 256, len))
		return OUT_OF_MEMORY;
	*p = (CUdeviceptr)(uintptr_t)m;
	return OK;
}

MOCK_EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	free((void *)(uintptr_t)p);
	return OK;
}
