/* SPDX-License-Identifier: MIT */
/*
 * GPU check of the uma transport (run by tests/gpu/run.sh on a host with an
 * NVIDIA GPU): a default endpoint in a child process sends at least 1 GiB
 * of pseudo-random messages to a uma endpoint; every message is checksummed
 * in place, in managed memory, by a CUDA kernel (PTX loaded through the
 * Driver API) and compared with the checksum the sender computed on the
 * CPU. Then the kernel's read bandwidth over a received buffer is measured
 * against a plain cuMemAlloc buffer of the same size.
 *
 * Checksum: sum over 64-bit words w[i] of w[i] * (2i + 1), modulo 2^64:
 * position-dependent, but order-independent so threads may add atomically.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#define MSG_BYTES (64u << 20)
#define NMSGS 20 /* 1.25 GiB */

static const char ptx[] =
	".version 7.0\n"
	".target sm_75\n"
	".address_size 64\n"
	".visible .entry csum(.param .u64 p_data, .param .u64 p_n, .param .u64 p_out)\n"
	"{\n"
	"  .reg .pred %p<2>;\n"
	"  .reg .b32 %r<5>;\n"
	"  .reg .b64 %rd<13>;\n"
	"  ld.param.u64 %rd1, [p_data];\n"
	"  ld.param.u64 %rd2, [p_n];\n"
	"  ld.param.u64 %rd3, [p_out];\n"
	"  mov.u32 %r1, %ctaid.x;\n"
	"  mov.u32 %r2, %ntid.x;\n"
	"  mov.u32 %r3, %tid.x;\n"
	"  mov.u32 %r4, %nctaid.x;\n"
	"  mul.wide.u32 %rd4, %r1, %r2;\n"
	"  cvt.u64.u32 %rd5, %r3;\n"
	"  add.u64 %rd4, %rd4, %rd5;\n"
	"  mul.wide.u32 %rd6, %r4, %r2;\n"
	"  mov.u64 %rd7, 0;\n"
	"LOOP:\n"
	"  setp.ge.u64 %p1, %rd4, %rd2;\n"
	"  @%p1 bra DONE;\n"
	"  shl.b64 %rd8, %rd4, 3;\n"
	"  add.u64 %rd9, %rd1, %rd8;\n"
	"  ld.global.u64 %rd10, [%rd9];\n"
	"  shl.b64 %rd11, %rd4, 1;\n"
	"  add.u64 %rd11, %rd11, 1;\n"
	"  mad.lo.u64 %rd7, %rd10, %rd11, %rd7;\n"
	"  add.u64 %rd4, %rd4, %rd6;\n"
	"  bra LOOP;\n"
	"DONE:\n"
	"  atom.global.add.u64 %rd12, [%rd3], %rd7;\n"
	"  ret;\n"
	"}\n";

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;

static struct {
	CUresult (*Init)(unsigned);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*ModuleLoadData)(CUmodule *, const void *);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
				 unsigned, unsigned, unsigned, CUstream, void **, void **);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*CtxSynchronize)(void);
	CUresult (*EventCreate)(CUevent *, unsigned);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*EventSynchronize)(CUevent);
	CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
} cu;

#define CU(call)                                                          \
	do {                                                                  \
		CUresult r_ = (call);                                             \
		if (r_) {                                                         \
			fprintf(stderr, "FAIL: %s = %d\n", #call, r_);                \
			exit(1);                                                      \
		}                                                                 \
	} while (0)

static void load_cuda(void)
{
	static const struct {
		const char *name;
		void **slot;
	} syms[] = {
		{ "cuInit", (void **)&cu.Init },
		{ "cuDeviceGet", (void **)&cu.DeviceGet },
		{ "cuDevicePrimaryCtxRetain", (void **)&cu.DevicePrimaryCtxRetain },
		{ "cuCtxSetCurrent", (void **)&cu.CtxSetCurrent },
		{ "cuModuleLoadData", (void **)&cu.ModuleLoadData },
		{ "cuModuleGetFunction", (void **)&cu.ModuleGetFunction },
		{ "cuLaunchKernel", (void **)&cu.LaunchKernel },
		{ "cuMemAlloc_v2", (void **)&cu.MemAlloc },
		{ "cuMemFree_v2", (void **)&cu.MemFree },
		{ "cuMemsetD8_v2", (void **)&cu.MemsetD8 },
		{ "cuMemcpyDtoH_v2", (void **)&cu.MemcpyDtoH },
		{ "cuCtxSynchronize", (void **)&cu.CtxSynchronize },
		{ "cuEventCreate", (void **)&cu.EventCreate },
		{ "cuEventRecord", (void **)&cu.EventRecord },
		{ "cuEventSynchronize", (void **)&cu.EventSynchronize },
		{ "cuEventElapsedTime", (void **)&cu.EventElapsedTime },
	};
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);

	if (!lib) {
		printf("SKIP: libcuda.so.1 not found: %s\n", dlerror());
		exit(77);
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].slot = dlsym(lib, syms[i].name);
		if (!*syms[i].slot) {
			fprintf(stderr, "FAIL: libcuda.so.1 lacks %s\n", syms[i].name);
			exit(1);
		}
	}
}

static uint64_t cpu_csum(const uint64_t *w, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; i < n; i++)
		s += w[i] * (2 * (uint64_t)i + 1);
	return s;
}

static void sender(const char *peer, int fd)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	uint64_t *buf = malloc(MSG_BYTES), x = 0x9e3779b97f4a7c15ull;
	struct zap_transport *t;

	if (!buf || zap_pick("=default", 0, &attr, &t)) {
		fprintf(stderr, "sender: %s\n", zap_last_error());
		_exit(1);
	}
	for (int m = 0; m < NMSGS; m++) {
		uint64_t sum;

		for (size_t i = 0; i < MSG_BYTES / 8; i++) { /* xorshift64 */
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[i] = x;
		}
		sum = cpu_csum(buf, MSG_BYTES / 8);
		if (zap_send(t, peer, buf, MSG_BYTES, NULL) ||
		    write(fd, &sum, sizeof(sum)) != sizeof(sum)) {
			fprintf(stderr, "sender: %s\n", zap_last_error());
			_exit(1);
		}
	}
	zap_close(t);
	_exit(0);
}

static uint64_t gpu_csum(CUfunction f, CUdeviceptr data, size_t bytes,
			 CUdeviceptr out, float *ms)
{
	unsigned long long n = bytes / 8;
	void *args[] = { &data, &n, &out };
	CUevent a, b;
	uint64_t sum;

	CU(cu.MemsetD8(out, 0, 8));
	CU(cu.EventCreate(&a, 0));
	CU(cu.EventCreate(&b, 0));
	CU(cu.EventRecord(a, NULL));
	CU(cu.LaunchKernel(f, 1056, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CU(cu.EventRecord(b, NULL));
	CU(cu.EventSynchronize(b));
	CU(cu.EventElapsedTime(ms, a, b));
	CU(cu.MemcpyDtoH(&sum, out, 8));
	return sum;
}

int main(void)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *uma;
	char addr[ZAP_PEER_MAX];
	struct zap_msg *keep = NULL;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction f;
	CUdeviceptr out, plain;
	float ms, best_managed = 1e9f, best_plain = 1e9f;
	unsigned long long total = 0;
	int p[2], status, bad = 0, rc;
	pid_t pid;

	rc = zap_pick("=uma", 0, &attr, &uma);
	if (rc) {
		fprintf(stderr, "FAIL: uma unavailable: %s\n", zap_strerror(rc));
		return 1;
	}
	zap_transport_address(uma, addr, sizeof(addr));
	if (pipe(p))
		return 1;
	pid = fork(); /* the sender touches no CUDA state */
	if (pid == 0) {
		close(p[0]);
		sender(addr, p[1]);
	}
	close(p[1]);

	load_cuda();
	CU(cu.Init(0));
	CU(cu.DeviceGet(&dev, 0));
	CU(cu.DevicePrimaryCtxRetain(&ctx, dev));
	CU(cu.CtxSetCurrent(ctx));
	CU(cu.ModuleLoadData(&mod, ptx));
	CU(cu.ModuleGetFunction(&f, mod, "csum"));
	CU(cu.MemAlloc(&out, 8));

	for (int m = 0; m < NMSGS; m++) {
		struct zap_msg *msg;
		uint64_t want, got;

		if (zap_recv(uma, NULL, &msg) || read(p[0], &want, 8) != 8) {
			fprintf(stderr, "FAIL: receive %d: %s\n", m, zap_last_error());
			return 1;
		}
		if (!zap_msg_device_ptr(msg) || zap_msg_len(msg) != MSG_BYTES) {
			fprintf(stderr, "FAIL: message %d not device-visible or short\n", m);
			return 1;
		}
		got = gpu_csum(f, (CUdeviceptr)(uintptr_t)zap_msg_device_ptr(msg),
			       MSG_BYTES, out, &ms);
		bad += got != want;
		total += zap_msg_len(msg);
		if (keep)
			zap_msg_release(keep);
		keep = msg;
	}
	waitpid(pid, &status, 0);
	printf("received %llu bytes in %d messages into managed memory; "
	       "GPU checksums matching the sender's: %d/%d\n",
	       total, NMSGS, NMSGS - bad, NMSGS);

	/* Read bandwidth: a received (managed) buffer against cuMemAlloc. */
	CU(cu.MemAlloc(&plain, MSG_BYTES));
	CU(cu.MemsetD8(plain, 7, MSG_BYTES));
	for (int i = 0; i < 10; i++) {
		gpu_csum(f, (CUdeviceptr)(uintptr_t)zap_msg_device_ptr(keep), MSG_BYTES,
			 out, &ms);
		if (ms < best_managed)
			best_managed = ms;
		gpu_csum(f, plain, MSG_BYTES, out, &ms);
		if (ms < best_plain)
			best_plain = ms;
	}
	printf("kernel read bandwidth, %u MiB: received managed buffer %.1f GB/s, "
	       "cuMemAlloc buffer %.1f GB/s, ratio %.2f\n", MSG_BYTES >> 20,
	       MSG_BYTES / (best_managed * 1e6), MSG_BYTES / (best_plain * 1e6),
	       best_plain / best_managed);
	zap_msg_release(keep);
	cu.MemFree(plain);
	cu.MemFree(out);
	zap_close(uma);
	if (bad || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "FAIL: %d checksum mismatches, sender status %d\n", bad, status);
		return 1;
	}
	return 0;
}
