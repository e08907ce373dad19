/* SPDX-License-Identifier: MIT */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zap-cuda.h"

static struct zcu cu;
static enum zap_probe_result load_result;
static char load_why[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void)
{
	static const struct {
		const char *sym;
		size_t off;
	} syms[] = {
#define SYM(field, name) { name, offsetof(struct zcu, field) }
		SYM(Init, "cuInit"),
		SYM(DriverGetVersion, "cuDriverGetVersion"),
		SYM(DeviceGetCount, "cuDeviceGetCount"),
		SYM(DeviceGet, "cuDeviceGet"),
		SYM(DeviceGetName, "cuDeviceGetName"),
		SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
		SYM(GetErrorName, "cuGetErrorName"),
		SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		/* cuda.h maps these names to their _v2 entry points. */
		SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
		SYM(CtxPushCurrent, "cuCtxPushCurrent_v2"),
		SYM(CtxPopCurrent, "cuCtxPopCurrent_v2"),
		SYM(MemAllocManaged, "cuMemAllocManaged"),
		SYM(MemFree, "cuMemFree_v2"),
	};
	/* Optional: a driver without them still serves uma (see zap-cuda.h). */
	static const struct {
		const char *sym;
		size_t off;
	} opt[] = {
		SYM(MemAlloc, "cuMemAlloc_v2"),
		SYM(MemcpyDtoD, "cuMemcpyDtoD_v2"),
		SYM(MemcpyHtoD, "cuMemcpyHtoD_v2"),
		SYM(MemcpyDtoH, "cuMemcpyDtoH_v2"),
		SYM(MemGetHandleForAddressRange, "cuMemGetHandleForAddressRange"),
		SYM(DeviceGetPCIBusId, "cuDeviceGetPCIBusId"),
		SYM(PointerSetAttribute, "cuPointerSetAttribute"),
		/* cuda.h maps these two names to their _v2 entry points. */
		SYM(MemHostRegister, "cuMemHostRegister_v2"),
		SYM(MemHostUnregister, "cuMemHostUnregister"),
		SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
	};
#undef SYM
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		const char *e = dlerror();

		load_result = ZAP_PROBE_NOT_PRESENT;
		snprintf(load_why, sizeof(load_why),
			 "driver library libcuda.so.1 not found (%s)", e ? e : "?");
		return;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *fn = dlsym(lib, syms[i].sym);

		if (!fn) {
			load_result = ZAP_PROBE_ERROR;
			snprintf(load_why, sizeof(load_why),
				 "libcuda.so.1 lacks %s (driver too old or broken)",
				 syms[i].sym);
			dlclose(lib);
			return;
		}
		memcpy((char *)&cu + syms[i].off, &fn, sizeof(fn));
	}
	for (size_t i = 0; i < sizeof(opt) / sizeof(opt[0]); i++) {
		void *fn = dlsym(lib, opt[i].sym);

		memcpy((char *)&cu + opt[i].off, &fn, sizeof(fn));
	}
	cu.lib = lib;
	load_result = ZAP_PROBE_OK;
}

enum zap_probe_result zcu_load(const struct zcu **out, char *why, size_t len)
{
	pthread_once(&load_once, load);
	if (load_result != ZAP_PROBE_OK) {
		snprintf(why, len, "%s", load_why);
		return load_result;
	}
	*out = &cu;
	return ZAP_PROBE_OK;
}

const char *zcu_error_name(const struct zcu *c, zcu_result r, char *buf, size_t len)
{
	/* Used when the driver cannot name its own error (the toolkit's stub
	 * library answers every call, cuGetErrorName too, with an error). */
	static const struct {
		int code;
		const char *name;
	} known[] = {
		{ 1, "CUDA_ERROR_INVALID_VALUE" },
		{ 2, "CUDA_ERROR_OUT_OF_MEMORY" },
		{ 3, "CUDA_ERROR_NOT_INITIALIZED" },
		{ 34, "CUDA_ERROR_STUB_LIBRARY" },
		{ 35, "CUDA_ERROR_INSUFFICIENT_DRIVER" },
		{ 46, "CUDA_ERROR_DEVICE_UNAVAILABLE" },
		{ 100, "CUDA_ERROR_NO_DEVICE" },
		{ 101, "CUDA_ERROR_INVALID_DEVICE" },
		{ 304, "CUDA_ERROR_OPERATING_SYSTEM" },
		{ 801, "CUDA_ERROR_NOT_SUPPORTED" },
		{ 803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH" },
		{ 804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE" },
	};
	const char *name = NULL;

	if (c && c->GetErrorName(r, &name) != ZCU_SUCCESS)
		name = NULL;
	for (size_t i = 0; !name && i < sizeof(known) / sizeof(known[0]); i++)
		if (known[i].code == r)
			name = known[i].name;
	snprintf(buf, len, "%s (%d)", name ? name : "CUresult", r);
	return buf;
}

int zcu_env_device(const struct zap_host *host, uint64_t *ord, char *why, size_t len)
{
	int rc;

	*ord = 0;
	if (!host || !ZAP_HOST_HAS(host, config_u64))
		return 0;
	rc = host->config_u64("ZAP_CUDA_DEVICE", ord);
	if (rc < 0) {
		snprintf(why, len, "%s", host->last_error());
		return -EINVAL;
	}
	return rc;
}

enum zap_probe_result zcu_open_device(const struct zap_host *host, const struct zcu *c,
				      struct zcu_device_info *info, char *why, size_t len)
{
	uint64_t ord;
	int set = zcu_env_device(host, &ord, why, len);
	char err[96];
	zcu_result r;
	int n = 0;

	memset(info, 0, sizeof(*info));
	r = c->Init(0);
	if (r != ZCU_SUCCESS) {
		snprintf(why, len, "cuInit failed: %s",
			 zcu_error_name(c, r, err, sizeof(err)));
		return ZAP_PROBE_NOT_PRESENT;
	}
	c->DriverGetVersion(&info->driver_version);
	r = c->DeviceGetCount(&n);
	if (r != ZCU_SUCCESS || n == 0) {
		snprintf(why, len, "no CUDA device%s%s",
			 r != ZCU_SUCCESS ? ": cuDeviceGetCount failed: " : "",
			 r != ZCU_SUCCESS ? zcu_error_name(c, r, err, sizeof(err)) : "");
		return ZAP_PROBE_NOT_PRESENT;
	}
	if (set < 0)
		return ZAP_PROBE_ERROR;
	if (set) {
		if (ord >= (uint64_t)n) {
			snprintf(why, len,
				 "ZAP_CUDA_DEVICE=%llu is not a device ordinal in [0, %d]",
				 (unsigned long long)ord, n - 1);
			return ZAP_PROBE_ERROR;
		}
		info->ordinal = (int)ord;
	}
	r = c->DeviceGet(&info->dev, info->ordinal);
	if (r != ZCU_SUCCESS) {
		snprintf(why, len, "cuDeviceGet(%d) failed: %s", info->ordinal,
			 zcu_error_name(c, r, err, sizeof(err)));
		return ZAP_PROBE_ERROR;
	}
	if (c->DeviceGetName(info->name, (int)sizeof(info->name), info->dev) !=
	    ZCU_SUCCESS)
		snprintf(info->name, sizeof(info->name), "device %d", info->ordinal);
	c->DeviceGetAttribute(&info->managed, ZCU_ATTR_MANAGED_MEMORY, info->dev);
	c->DeviceGetAttribute(&info->concurrent_managed,
			      ZCU_ATTR_CONCURRENT_MANAGED_ACCESS, info->dev);
	c->DeviceGetAttribute(&info->pageable_access, ZCU_ATTR_PAGEABLE_MEMORY_ACCESS,
			      info->dev);
	c->DeviceGetAttribute(&info->host_page_tables,
			      ZCU_ATTR_PAGEABLE_USES_HOST_PAGE_TABLES, info->dev);
	snprintf(why, len, "CUDA device %d: %s", info->ordinal, info->name);
	return ZAP_PROBE_OK;
}
