/* SPDX-License-Identifier: MIT */
/* Kernel launches for the GPU checks; see gpu-kernels.h. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu-kernels.h"

#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

/*
 * Hand-written PTX, so that a machine with only the driver can run it (the
 * driver JIT-compiles it for whatever GPU it has; ISA 7.0 / sm_75 is the
 * floor, not the target). device-check.sh has ptxas assemble it wherever
 * the toolkit is installed, the dry run included.
 *
 * zap_csum(data, n, out): *out += sum over 64-bit words i < n of
 *   data[i] * (2i + 1): position-dependent, yet order-independent, so each
 *   thread sums its grid-stride share and adds it atomically.
 * zap_read(data, n16, out): *out += sum of every 64-bit word in n16
 *   16-byte units, read with 16-byte loads: the bandwidth kernel.
 */
const char gk_ptx[] =
	".version 7.0\n"
	".target sm_75\n"
	".address_size 64\n"
	"\n"
	".visible .entry zap_csum(.param .u64 p_data, .param .u64 p_n, .param .u64 p_out)\n"
	"{\n"
	"  .reg .pred %p<2>;\n"
	"  .reg .b32 %r<5>;\n"
	"  .reg .b64 %rd<13>;\n"
	"  ld.param.u64 %rd1, [p_data];\n"
	"  ld.param.u64 %rd2, [p_n];\n"
	"  ld.param.u64 %rd3, [p_out];\n"
	"  cvta.to.global.u64 %rd1, %rd1;\n"
	"  cvta.to.global.u64 %rd3, %rd3;\n"
	"  mov.u32 %r1, %ctaid.x;\n"
	"  mov.u32 %r2, %ntid.x;\n"
	"  mov.u32 %r3, %tid.x;\n"
	"  mov.u32 %r4, %nctaid.x;\n"
	"  mul.wide.u32 %rd4, %r1, %r2;\n"
	"  cvt.u64.u32 %rd5, %r3;\n"
	"  add.u64 %rd4, %rd4, %rd5;\n"
	"  mul.wide.u32 %rd6, %r4, %r2;\n"
	"  mov.u64 %rd7, 0;\n"
	"CS_LOOP:\n"
	"  setp.ge.u64 %p1, %rd4, %rd2;\n"
	"  @%p1 bra CS_DONE;\n"
	"  shl.b64 %rd8, %rd4, 3;\n"
	"  add.u64 %rd9, %rd1, %rd8;\n"
	"  ld.global.u64 %rd10, [%rd9];\n"
	"  shl.b64 %rd11, %rd4, 1;\n"
	"  add.u64 %rd11, %rd11, 1;\n"
	"  mad.lo.u64 %rd7, %rd10, %rd11, %rd7;\n"
	"  add.u64 %rd4, %rd4, %rd6;\n"
	"  bra CS_LOOP;\n"
	"CS_DONE:\n"
	"  atom.global.add.u64 %rd12, [%rd3], %rd7;\n"
	"  ret;\n"
	"}\n"
	"\n"
	".visible .entry zap_read(.param .u64 p_data, .param .u64 p_n16, .param .u64 p_out)\n"
	"{\n"
	"  .reg .pred %p<2>;\n"
	"  .reg .b32 %r<5>;\n"
	"  .reg .b64 %rd<14>;\n"
	"  ld.param.u64 %rd1, [p_data];\n"
	"  ld.param.u64 %rd2, [p_n16];\n"
	"  ld.param.u64 %rd3, [p_out];\n"
	"  cvta.to.global.u64 %rd1, %rd1;\n"
	"  cvta.to.global.u64 %rd3, %rd3;\n"
	"  mov.u32 %r1, %ctaid.x;\n"
	"  mov.u32 %r2, %ntid.x;\n"
	"  mov.u32 %r3, %tid.x;\n"
	"  mov.u32 %r4, %nctaid.x;\n"
	"  mul.wide.u32 %rd4, %r1, %r2;\n"
	"  cvt.u64.u32 %rd5, %r3;\n"
	"  add.u64 %rd4, %rd4, %rd5;\n"
	"  mul.wide.u32 %rd6, %r4, %r2;\n"
	"  mov.u64 %rd7, 0;\n"
	"RD_LOOP:\n"
	"  setp.ge.u64 %p1, %rd4, %rd2;\n"
	"  @%p1 bra RD_DONE;\n"
	"  shl.b64 %rd8, %rd4, 4;\n"
	"  add.u64 %rd9, %rd1, %rd8;\n"
	"  ld.global.v2.u64 {%rd10, %rd11}, [%rd9];\n"
	"  add.u64 %rd7, %rd7, %rd10;\n"
	"  add.u64 %rd7, %rd7, %rd11;\n"
	"  add.u64 %rd4, %rd4, %rd6;\n"
	"  bra RD_LOOP;\n"
	"RD_DONE:\n"
	"  atom.global.add.u64 %rd12, [%rd3], %rd7;\n"
	"  ret;\n"
	"}\n";

const char *gk_err(const struct gk *g, zcu_result r)
{
	static char buf[96];

	return zcu_error_name(g->cu, r, buf, sizeof(buf));
}

int gk_resolve(struct gk *g, void *lib, char *why, size_t len)
{
	static const struct {
		const char *sym, *alt; /* alt: the name before a _v2 revision */
		size_t off;
	} syms[] = {
#define SYM(field, name, alt) { name, alt, offsetof(struct gk, field) }
		SYM(CtxSynchronize, "cuCtxSynchronize", NULL),
		SYM(ModuleLoadDataEx, "cuModuleLoadDataEx", NULL),
		SYM(ModuleGetFunction, "cuModuleGetFunction", NULL),
		SYM(ModuleUnload, "cuModuleUnload", NULL),
		SYM(LaunchKernel, "cuLaunchKernel", NULL),
		SYM(EventCreate, "cuEventCreate", NULL),
		SYM(EventRecord, "cuEventRecord", NULL),
		SYM(EventSynchronize, "cuEventSynchronize", NULL),
		/* CUDA 13's cuda.h maps these to _v2; older drivers lack it. */
		SYM(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
		SYM(EventDestroy, "cuEventDestroy_v2", "cuEventDestroy"),
		SYM(MemGetInfo, "cuMemGetInfo_v2", NULL),
		SYM(MemsetD8, "cuMemsetD8_v2", NULL),
#undef SYM
	};

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *fn = dlsym(lib, syms[i].sym);

		if (!fn && syms[i].alt)
			fn = dlsym(lib, syms[i].alt);
		if (!fn) {
			snprintf(why, len, "the driver lacks %s", syms[i].sym);
			return -ENOENT;
		}
		memcpy((char *)g + syms[i].off, &fn, sizeof(fn));
	}
	return 0;
}

int gk_open(struct gk *g, char *why, size_t len)
{
	char log[4096] = "";
	int opt[] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
	void *val[] = { log, (void *)(uintptr_t)sizeof(log) };
	enum zap_probe_result pr;
	zcu_result r;

	memset(g, 0, sizeof(*g));
	pr = zcu_load(&g->cu, why, len);
	if (pr == ZAP_PROBE_NOT_PRESENT)
		return 77;
	if (pr != ZAP_PROBE_OK)
		return 1;
	if (gk_resolve(g, g->cu->lib, why, len))
		return 1;
	pr = zcu_open_device(NULL, g->cu, &g->info, why, len);
	if (pr == ZAP_PROBE_NOT_PRESENT)
		return 77;
	if (pr != ZAP_PROBE_OK)
		return 1;
	r = g->cu->DevicePrimaryCtxRetain(&g->ctx, g->info.dev);
	if (r == ZCU_SUCCESS)
		r = g->cu->CtxPushCurrent(g->ctx);
	if (r != ZCU_SUCCESS) {
		snprintf(why, len, "cannot make the primary context current: %s", gk_err(g, r));
		return 1;
	}
	if (g->cu->DeviceGetAttribute(&g->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
				      g->info.dev) != ZCU_SUCCESS || g->sms <= 0)
		g->sms = 80;
	r = g->ModuleLoadDataEx(&g->mod, gk_ptx, 2, opt, val);
	if (r != ZCU_SUCCESS) {
		snprintf(why, len, "the driver refused the PTX: %s: %s", gk_err(g, r), log);
		return 1;
	}
	if ((r = g->ModuleGetFunction(&g->csum, g->mod, "zap_csum")) != ZCU_SUCCESS ||
	    (r = g->ModuleGetFunction(&g->read, g->mod, "zap_read")) != ZCU_SUCCESS ||
	    (r = g->cu->MemAlloc ? g->cu->MemAlloc(&g->out, 8) : -1) != ZCU_SUCCESS) {
		snprintf(why, len, "kernel setup failed: %s", gk_err(g, r));
		return 1;
	}
	return 0;
}

void gk_close(struct gk *g)
{
	zcu_ctx prev;

	if (!g->ctx)
		return;
	if (g->out)
		g->cu->MemFree(g->out);
	if (g->mod)
		g->ModuleUnload(g->mod);
	g->cu->CtxPopCurrent(&prev);
	g->cu->DevicePrimaryCtxRelease(g->info.dev);
	g->ctx = NULL;
}

zcu_result gk_run(struct gk *g, gk_function f, zcu_ptr data, size_t bytes,
		  int reps, uint64_t *result, float *ms, const char **what)
{
	/* Kernel parameters are passed by address, each of its PTX type. */
	unsigned long long n = f == g->read ? bytes / 16 : bytes / 8;
	void *args[] = { &data, &n, &g->out };
	gk_event a = NULL, b = NULL;
	zcu_result r;

#define STEP(call)                  \
	do {                            \
		*what = #call;              \
		if ((r = (call)) != ZCU_SUCCESS) \
			goto out;               \
	} while (0)
	STEP(g->MemsetD8(g->out, 0, 8));
	STEP(g->EventCreate(&a, 0));
	STEP(g->EventCreate(&b, 0));
	STEP(g->EventRecord(a, NULL));
	for (int i = 0; i < reps; i++)
		STEP(g->LaunchKernel(f, (unsigned)g->sms * 8, 1, 1, 256, 1, 1, 0, NULL,
				     args, NULL));
	STEP(g->EventRecord(b, NULL));
	STEP(g->EventSynchronize(b));
	STEP(g->EventElapsedTime(ms, a, b));
	STEP(g->cu->MemcpyDtoH ? g->cu->MemcpyDtoH(result, g->out, 8) : -1);
#undef STEP
out:
	if (a)
		g->EventDestroy(a);
	if (b)
		g->EventDestroy(b);
	return r;
}

uint64_t gk_cpu_csum(const uint64_t *w, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; i < n; i++)
		s += w[i] * (2 * (uint64_t)i + 1);
	return s;
}

uint64_t gk_cpu_sum(const uint64_t *w, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; i < n; i++)
		s += w[i];
	return s;
}
