/* SPDX-License-Identifier: MIT */
/* Built only where cuda.h exists: zap-cuda.h must agree with it. */
#include <cuda.h>

#include "zap-cuda.h"

_Static_assert(sizeof(zcu_result) == sizeof(CUresult), "CUresult");
_Static_assert(sizeof(zcu_device) == sizeof(CUdevice), "CUdevice");
_Static_assert(sizeof(zcu_ptr) == sizeof(CUdeviceptr), "CUdeviceptr");
_Static_assert(ZCU_SUCCESS == CUDA_SUCCESS, "CUDA_SUCCESS");
_Static_assert(ZCU_ATTR_MANAGED_MEMORY == CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "attr");
_Static_assert(ZCU_ATTR_PAGEABLE_MEMORY_ACCESS ==
		       CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
	       "attr");
_Static_assert(ZCU_ATTR_CONCURRENT_MANAGED_ACCESS ==
		       CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
	       "attr");
_Static_assert(ZCU_ATTR_PAGEABLE_USES_HOST_PAGE_TABLES ==
		       CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
	       "attr");
_Static_assert(ZCU_MEM_ATTACH_GLOBAL == CU_MEM_ATTACH_GLOBAL, "attach");
_Static_assert(ZCU_MEMHOSTREGISTER_PORTABLE == CU_MEMHOSTREGISTER_PORTABLE &&
		       ZCU_MEMHOSTREGISTER_DEVICEMAP == CU_MEMHOSTREGISTER_DEVICEMAP,
	       "cuMemHostRegister flags");
_Static_assert(ZCU_ATTR_PCI_BUS_ID == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, "attr");
_Static_assert(ZCU_ATTR_PCI_DEVICE_ID == CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, "attr");
_Static_assert(ZCU_ATTR_PCI_DOMAIN_ID == CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, "attr");
_Static_assert(ZCU_ATTR_GPU_DIRECT_RDMA_SUPPORTED ==
		       CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
	       "attr");
_Static_assert(ZCU_ATTR_DMA_BUF_SUPPORTED == CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
	       "attr");
_Static_assert(ZCU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD ==
		       CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
	       "handle type");
_Static_assert(ZCU_POINTER_ATTRIBUTE_SYNC_MEMOPS == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
	       "pointer attr");
_Static_assert(sizeof(CUmemRangeHandleType) == sizeof(int), "handle type size");
_Static_assert(CUDA_ERROR_STUB_LIBRARY == 34 && CUDA_ERROR_NO_DEVICE == 100,
	       "error table in zap-cuda.c");

int zap_cuda_abi_check(void);
int zap_cuda_abi_check(void)
{
	return 0;
}
