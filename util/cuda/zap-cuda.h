/* SPDX-License-Identifier: MIT */
/*
 * The CUDA Driver API, loaded at run time (shared by the uma and gpudirect
 * plugins). The plugins link no CUDA library: they dlopen libcuda.so.1
 * themselves, so their files load on every host and their probes can say
 * which step failed. The few types and constants used are declared here so
 * the plugins build without the CUDA toolkit; cuda-abi-check.c compares
 * them with cuda.h wherever the toolkit is installed.
 */
#ifndef ZAP_CUDA_H
#define ZAP_CUDA_H

#include <stddef.h>

#include <zap/zap-plugin.h>

typedef int zcu_result;             /* CUresult */
typedef int zcu_device;             /* CUdevice */
typedef unsigned long long zcu_ptr; /* CUdeviceptr */
typedef struct zcu_ctx_st *zcu_ctx; /* CUcontext */

#define ZCU_SUCCESS 0
#define ZCU_ATTR_MANAGED_MEMORY 83
#define ZCU_ATTR_PAGEABLE_MEMORY_ACCESS 88
#define ZCU_ATTR_CONCURRENT_MANAGED_ACCESS 89
#define ZCU_ATTR_PAGEABLE_USES_HOST_PAGE_TABLES 100
#define ZCU_MEM_ATTACH_GLOBAL 0x1
#define ZCU_ATTR_PCI_BUS_ID 33
#define ZCU_ATTR_PCI_DEVICE_ID 34
#define ZCU_ATTR_PCI_DOMAIN_ID 50
#define ZCU_ATTR_GPU_DIRECT_RDMA_SUPPORTED 116
#define ZCU_ATTR_DMA_BUF_SUPPORTED 124
#define ZCU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 0x1
#define ZCU_POINTER_ATTRIBUTE_SYNC_MEMOPS 6
#define ZCU_MEMHOSTREGISTER_PORTABLE 0x01
#define ZCU_MEMHOSTREGISTER_DEVICEMAP 0x02

struct zcu {
	void *lib;
	zcu_result (*Init)(unsigned flags);
	zcu_result (*DriverGetVersion)(int *v);
	zcu_result (*DeviceGetCount)(int *n);
	zcu_result (*DeviceGet)(zcu_device *d, int ordinal);
	zcu_result (*DeviceGetName)(char *name, int len, zcu_device d);
	zcu_result (*DeviceGetAttribute)(int *v, int attr, zcu_device d);
	zcu_result (*GetErrorName)(zcu_result r, const char **name);
	zcu_result (*DevicePrimaryCtxRetain)(zcu_ctx *c, zcu_device d);
	zcu_result (*DevicePrimaryCtxRelease)(zcu_device d);
	zcu_result (*CtxPushCurrent)(zcu_ctx c);
	zcu_result (*CtxPopCurrent)(zcu_ctx *c);
	zcu_result (*MemAllocManaged)(zcu_ptr *p, size_t len, unsigned flags);
	zcu_result (*MemFree)(zcu_ptr p);

	/*
	 * Optional entry points, used by gpudirect and dpdk: resolved apart from
	 * the ones above and left NULL when the driver lacks them, so that an
	 * older driver still passes uma's probe. Check before calling.
	 */
	zcu_result (*MemAlloc)(zcu_ptr *p, size_t len);
	zcu_result (*MemcpyDtoD)(zcu_ptr dst, zcu_ptr src, size_t len);
	zcu_result (*MemcpyHtoD)(zcu_ptr dst, const void *src, size_t len);
	zcu_result (*MemcpyDtoH)(void *dst, zcu_ptr src, size_t len);
	zcu_result (*MemGetHandleForAddressRange)(void *handle, zcu_ptr p, size_t len,
						  int type, unsigned long long flags);
	zcu_result (*DeviceGetPCIBusId)(char *id, int len, zcu_device d);
	zcu_result (*PointerSetAttribute)(const void *value, int attr, zcu_ptr p);
	zcu_result (*MemHostRegister)(void *p, size_t len, unsigned flags);
	zcu_result (*MemHostUnregister)(void *p);
	zcu_result (*MemHostGetDevicePointer)(zcu_ptr *dev, void *p, unsigned flags);
};

/** What zcu_open_device() found out. */
struct zcu_device_info {
	zcu_device dev;
	int ordinal;
	char name[128];
	int driver_version;
	int managed;            /* CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY */
	int concurrent_managed; /* ..._CONCURRENT_MANAGED_ACCESS */
	int pageable_access;    /* ..._PAGEABLE_MEMORY_ACCESS */
	int host_page_tables;   /* ..._PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES */
};

/*
 * Load libcuda.so.1 and resolve every mandatory entry point above (the
 * optional ones where the driver has them), once per process
 * (later calls return the first outcome). @why gets the reason on failure.
 * Return: ZAP_PROBE_OK; ZAP_PROBE_NOT_PRESENT when the library is absent;
 * ZAP_PROBE_ERROR when it lacks an entry point.
 */
enum zap_probe_result zcu_load(const struct zcu **cu, char *why, size_t len);

/* "CUDA_ERROR_NO_DEVICE (100)": the driver's name when it can say, else a
 * built-in table, else the number. */
const char *zcu_error_name(const struct zcu *cu, zcu_result r, char *buf, size_t len);

/*
 * ZAP_CUDA_DEVICE through libzap's registry (zap_host.config_u64): 1 and
 * the ordinal in *@ord when set, 0 when unset (or @host is NULL or older
 * than plugin ABI 1.4: *@ord = 0), -EINVAL with @why for a bad value.
 */
int zcu_env_device(const struct zap_host *host, uint64_t *ord, char *why, size_t len);

/*
 * cuInit, then the device ZAP_CUDA_DEVICE names (an ordinal, default 0)
 * and its attributes. NOT_PRESENT with the failed step (cuInit failed,
 * no device); ERROR for a bad ZAP_CUDA_DEVICE.
 */
enum zap_probe_result zcu_open_device(const struct zap_host *host, const struct zcu *cu,
				      struct zcu_device_info *info, char *why,
				      size_t len);

#endif
