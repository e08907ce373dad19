/* SPDX-License-Identifier: MIT */
/*
 * What the GPU checks need from the CUDA Driver API beyond util/cuda's
 * loader (which the uma plugin uses): modules, kernel launches, events and
 * device memory figures. Resolved with dlsym from the same libcuda.so.1
 * handle zcu_load() opened, so a bare machine needs only the driver: the
 * kernels are PTX text the driver JIT-compiles (no nvcc, no cudart).
 *
 * Not thread-safe: one thread makes every call in this header, after
 * gk_open() and before gk_close().
 */
#ifndef ZAP_GPU_KERNELS_H
#define ZAP_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "zap-cuda.h"

typedef struct gk_mod_st *gk_module; /* CUmodule */
typedef struct gk_fn_st *gk_function; /* CUfunction */
typedef struct gk_ev_st *gk_event;    /* CUevent */

/* The kernels' PTX (two entries, zap_csum and zap_read; see gpu-kernels.c). */
extern const char gk_ptx[];

struct gk {
	const struct zcu *cu;
	struct zcu_device_info info;
	zcu_ctx ctx;  /* the device's primary context, current while open */
	int sms;      /* multiprocessors, to size the grid */
	gk_module mod;
	gk_function csum, read;
	zcu_ptr out;  /* 8 bytes of device memory for the kernels' result */

	zcu_result (*CtxSynchronize)(void);
	zcu_result (*ModuleLoadDataEx)(gk_module *m, const void *image, unsigned n,
				       int *options, void **values);
	zcu_result (*ModuleGetFunction)(gk_function *f, gk_module m, const char *name);
	zcu_result (*ModuleUnload)(gk_module m);
	zcu_result (*LaunchKernel)(gk_function f, unsigned gx, unsigned gy, unsigned gz,
				   unsigned bx, unsigned by, unsigned bz, unsigned shmem,
				   void *stream, void **params, void **extra);
	zcu_result (*EventCreate)(gk_event *e, unsigned flags);
	zcu_result (*EventRecord)(gk_event e, void *stream);
	zcu_result (*EventSynchronize)(gk_event e);
	zcu_result (*EventElapsedTime)(float *ms, gk_event a, gk_event b);
	zcu_result (*EventDestroy)(gk_event e);
	zcu_result (*MemGetInfo)(size_t *free, size_t *total);
	zcu_result (*MemsetD8)(zcu_ptr p, unsigned char v, size_t n);
};

/*
 * Resolve the entry points above from @lib (a dlopen handle). Return 0, or
 * -ENOENT with the missing symbol's name in @why.
 */
int gk_resolve(struct gk *g, void *lib, char *why, size_t len);

/*
 * Load the driver (zcu_load), open the device uma uses (zcu_open_device:
 * ZAP_CUDA_DEVICE, default 0), make its primary context current, JIT the
 * PTX and allocate the result word. Return 0; 77 with the reason when
 * there is no driver or device (a skip); 1 with the reason on failure
 * (the JIT log included when the PTX is refused).
 */
int gk_open(struct gk *g, char *why, size_t len);
void gk_close(struct gk *g);

/*
 * Run @f over @bytes at @data (a device-visible address, @bytes a multiple
 * of 16) @reps times back to back between two events, @ms the time of all
 * of them. @result gets @reps times one pass's value, mod 2^64 (zap_csum:
 * sum of w[i] * (2i + 1); zap_read: sum of w[i]; over 64-bit words).
 * Return 0 or a CUresult (@what names the call that failed).
 */
zcu_result gk_run(struct gk *g, gk_function f, zcu_ptr data, size_t bytes,
		  int reps, uint64_t *result, float *ms, const char **what);

/* CPU versions of the two kernels, the oracle the GPU is checked against. */
uint64_t gk_cpu_csum(const uint64_t *w, size_t n);
uint64_t gk_cpu_sum(const uint64_t *w, size_t n);

/* "CUDA_ERROR_OUT_OF_MEMORY (2)" */
const char *gk_err(const struct gk *g, zcu_result r);

#endif
