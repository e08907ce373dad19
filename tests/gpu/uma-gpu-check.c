/* SPDX-License-Identifier: MIT */
/*
 * GPU checks of the uma transport, one step per run (tests/gpu/
 * device-check.sh runs them and writes the report):
 *
 *   csum       a default endpoint in a child process sends 1.25 GiB of
 *              pseudo-random messages to a uma endpoint; each is
 *              checksummed in place, in managed memory, by a GPU kernel and
 *              compared with the checksum the sender computed on the CPU.
 *   bandwidth  kernel read bandwidth over a received (managed) buffer, cold
 *              and warm, against a cuMemAlloc buffer of the same size.
 *   pressure   device memory filled with cuMemAlloc until less is free than
 *              the uma pool's cap; then the pool, full, blocks an
 *              allocation until its deadline, blocks one until a buffer is
 *              released, and the receive path pauses until buffers come
 *              back, every buffer checksummed by the GPU.
 *   ptx        print the kernels' PTX (for ptxas, where the toolkit is).
 *   symbols L  resolve every driver entry point the checks use from the
 *              library L (the toolkit's stub will do), calling none.
 *
 * The last line printed is "PASS: ...", "FAIL: ..." or "SKIP: ..." (exit
 * 0, 1, 77); SKIP means no CUDA driver or device, with the reason. A
 * watchdog (alarm) ends a step that hangs.
 *
 * Threads: the main thread makes every CUDA call; in "pressure" a second
 * thread only releases a pool buffer. The sender is a child forked before
 * any libzap or CUDA call, so it inherits no threads and no CUDA state.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#include "gpu-kernels.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static char why[1024];

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	return 1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- the sender (a child process, default transport) -------------------- */

struct send_req {
	char peer[ZAP_PEER_MAX];
	uint64_t bytes;
	uint32_t count;
	uint64_t seed;
};

struct sender {
	pid_t pid;
	int cmd;  /* parent -> child: struct send_req; EOF ends the child */
	int sums; /* child -> parent: one gk_cpu_csum per message, before it */
};

static void xorshift_fill(uint64_t *w, size_t n, uint64_t *x)
{
	for (size_t i = 0; i < n; i++) {
		*x ^= *x << 13;
		*x ^= *x >> 7;
		*x ^= *x << 17;
		w[i] = *x;
	}
}

static int read_full(int fd, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t k = read(fd, (char *)buf + got, len - got);

		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			return -1;
		}
		got += (size_t)k;
	}
	return 0;
}

static void sender_main(int cmd, int sums)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *t = NULL;
	struct send_req r;
	uint64_t *buf = NULL;
	size_t have = 0;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Only the built-in default: the sender loads no CUDA plugin. */
	unsetenv("ZAP_PLUGIN_PATH");
	setenv("ZAP_TRANSPORT_QUIET", "1", 1);
	while (read_full(cmd, &r, sizeof(r)) == 0) {
		uint64_t x = r.seed;

		if (r.bytes > have) {
			free(buf);
			buf = malloc(r.bytes);
			have = r.bytes;
		}
		attr.max_msg_size = r.bytes > 64 * MiB ? r.bytes : 0;
		if (!buf || (!t && zap_pick("=default", 0, &attr, &t))) {
			fprintf(stderr, "sender: %s\n", buf ? zap_last_error() : "out of memory");
			_exit(1);
		}
		for (uint32_t m = 0; m < r.count; m++) {
			uint64_t sum;

			xorshift_fill(buf, r.bytes / 8, &x);
			sum = gk_cpu_csum(buf, r.bytes / 8);
			if (write(sums, &sum, sizeof(sum)) != sizeof(sum) ||
			    zap_send(t, r.peer, buf, r.bytes, NULL)) {
				fprintf(stderr, "sender: message %u: %s\n", m, zap_last_error());
				_exit(1);
			}
		}
	}
	zap_close(t);
	free(buf);
	_exit(0);
}

static int sender_start(struct sender *s)
{
	int cmd[2], sums[2];

	if (pipe(cmd) || pipe(sums))
		return -errno;
	s->pid = fork();
	if (s->pid < 0)
		return -errno;
	if (s->pid == 0) {
		close(cmd[1]);
		close(sums[0]);
		sender_main(cmd[0], sums[1]);
	}
	close(cmd[0]);
	close(sums[1]);
	s->cmd = cmd[1];
	s->sums = sums[0];
	return 0;
}

static int sender_send(struct sender *s, const char *peer, uint64_t bytes,
		       uint32_t count, uint64_t seed)
{
	struct send_req r = { .bytes = bytes, .count = count, .seed = seed };

	snprintf(r.peer, sizeof(r.peer), "%s", peer);
	return write(s->cmd, &r, sizeof(r)) == sizeof(r) ? 0 : -EPIPE;
}

/* End the child; 0 when it sent everything and exited cleanly. */
static int sender_stop(struct sender *s)
{
	int status = 0;

	close(s->cmd);
	close(s->sums);
	if (waitpid(s->pid, &status, 0) != s->pid)
		return -1;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* ---- shared by the steps ---------------------------------------------------- */

/* Open uma (strict) listening on loopback; 77 when it is unavailable. */
static int open_uma(uint64_t max_msg, uint64_t pool_bytes, struct zap_transport **t,
		    char *addr, size_t len)
{
	struct zap_attr attr = {
		.size = sizeof(attr), .listen = "127.0.0.1:0",
		.max_msg_size = max_msg, .pool_bytes = pool_bytes,
	};
	int rc = zap_pick("=uma", 0, &attr, t);

	if (rc == ZAP_ENOTAVAIL) {
		printf("SKIP: %s\n", zap_strerror(rc));
		return 77;
	}
	if (rc || zap_transport_address(*t, addr, len))
		return fail("opening uma: %s", zap_last_error());
	return 0;
}

/* Receive one message within @secs and check it is @bytes, device-visible,
 * and that the GPU's checksum of it, in place, is the sender's. */
static int recv_checked(struct gk *g, struct zap_transport *t, struct sender *s,
			uint64_t bytes, double secs, struct zap_msg **out)
{
	struct zap_ctx *ctx = NULL;
	struct zap_msg *m = NULL;
	uint64_t want, got;
	const char *what;
	zcu_result r;
	float ms;
	int rc;

	if (zap_ctx_new(&ctx))
		return fail("zap_ctx_new");
	zap_ctx_set_timeout(ctx, (uint64_t)(secs * 1e9));
	rc = zap_recv(t, ctx, &m);
	zap_ctx_free(ctx);
	if (rc)
		return fail("zap_recv: %s", zap_last_error());
	if (read_full(s->sums, &want, sizeof(want)))
		return fail("the sender died");
	if (zap_msg_len(m) != bytes || !zap_msg_device_ptr(m)) {
		zap_msg_release(m);
		return fail("a message of %zu bytes, device pointer %p: wanted %" PRIu64
			    " bytes in device-visible memory",
			    zap_msg_len(m), zap_msg_device_ptr(m), bytes);
	}
	r = gk_run(g, g->csum, (zcu_ptr)(uintptr_t)zap_msg_device_ptr(m), bytes, 1,
		   &got, &ms, &what);
	if (r != ZCU_SUCCESS) {
		zap_msg_release(m);
		return fail("%s: %s", what, gk_err(g, r));
	}
	if (got != want) {
		zap_msg_release(m);
		return fail("GPU checksum %016" PRIx64 " of a received message, the "
			    "sender's %016" PRIx64, got, want);
	}
	*out = m;
	return 0;
}

/* ---- csum: >= 1 GiB into managed memory, checksummed in place -------------- */

static int step_csum(struct sender *s)
{
	const uint64_t bytes = 64 * MiB;
	const uint32_t count = 20; /* 1.25 GiB */
	char addr[ZAP_PEER_MAX];
	struct zap_transport *t;
	struct zap_msg *prev = NULL, *m;
	struct gk g;
	double t0;
	int rc;

	rc = open_uma(0, 0, &t, addr, sizeof(addr));
	if (rc)
		return rc;
	rc = gk_open(&g, why, sizeof(why));
	if (rc) {
		zap_close(t);
		printf("%s: %s\n", rc == 77 ? "SKIP" : "FAIL", why);
		return rc;
	}
	printf("  device %d: %s; uma listening on %s\n", g.info.ordinal, g.info.name, addr);
	t0 = now();
	if (sender_send(s, addr, bytes, count, 0x9e3779b97f4a7c15ull))
		rc = fail("cannot reach the sender");
	for (uint32_t i = 0; !rc && i < count; i++) {
		rc = recv_checked(&g, t, s, bytes, 60, &m);
		/* Hold two at a time: the pool reuses the released one. */
		zap_msg_release(prev);
		prev = rc ? NULL : m;
	}
	zap_msg_release(prev);
	if (!rc) {
		double secs = now() - t0;

		printf("PASS: %.2f GiB in %u messages of %" PRIu64 " MiB received into "
		       "managed memory on %s; %u/%u GPU checksums, computed in place, "
		       "match the sender's (%.1f s, %.2f GB/s end to end)\n",
		       (double)(bytes * count) / GiB, count, bytes / MiB, g.info.name,
		       count, count, secs, bytes * count / secs / 1e9);
	}
	gk_close(&g);
	zap_close(t);
	return rc;
}

/* ---- bandwidth: received managed buffer against cuMemAlloc ----------------- */

static int read_gbps(struct gk *g, zcu_ptr p, size_t bytes, int reps, uint64_t want,
		     double *gbps)
{
	const char *what;
	uint64_t got;
	zcu_result r;
	float ms;

	r = gk_run(g, g->read, p, bytes, reps, &got, &ms, &what);
	if (r != ZCU_SUCCESS)
		return fail("%s: %s", what, gk_err(g, r));
	if (got != want * (uint64_t)reps)
		return fail("the read kernel summed %016" PRIx64 ", the CPU %016" PRIx64,
			    got, want * (uint64_t)reps);
	*gbps = (double)bytes * reps / (ms * 1e6);
	return 0;
}

static int step_bandwidth(struct sender *s)
{
	const uint64_t bytes = 256 * MiB;
	const int reps = 10, rounds = 5;
	uint64_t msum, psum = 0, word = 0x0707070707070707ull;
	double cold, best_m = 0, best_p = 0, gbps = 0;
	char addr[ZAP_PEER_MAX];
	struct zap_transport *t;
	struct zap_msg *m = NULL;
	zcu_ptr plain = 0, mp;
	zcu_result r;
	struct gk g;
	int rc;

	rc = open_uma(bytes, 0, &t, addr, sizeof(addr));
	if (rc)
		return rc;
	rc = gk_open(&g, why, sizeof(why));
	if (rc) {
		zap_close(t);
		printf("%s: %s\n", rc == 77 ? "SKIP" : "FAIL", why);
		return rc;
	}
	if (sender_send(s, addr, bytes, 1, 0x2545f4914f6cdd1dull))
		rc = fail("cannot reach the sender");
	if (!rc)
		rc = recv_checked(&g, t, s, bytes, 60, &m);
	if (rc)
		goto out;
	/* The CPU wrote these bytes as they arrived; recv_checked's kernel
	 * already pulled them to the GPU once. Touch them again on the CPU
	 * (the oracle for the read kernel) so the "cold" figure includes
	 * moving them back, as for a freshly received message. */
	msum = gk_cpu_sum(zap_msg_data(m), bytes / 8);
	mp = (zcu_ptr)(uintptr_t)zap_msg_device_ptr(m);
	rc = read_gbps(&g, mp, bytes, 1, msum, &cold);
	if (rc)
		goto out;
	r = g.cu->MemAlloc ? g.cu->MemAlloc(&plain, bytes) : -1;
	if (r == ZCU_SUCCESS)
		r = g.MemsetD8(plain, 7, bytes);
	if (r != ZCU_SUCCESS) {
		rc = fail("cuMemAlloc/cuMemsetD8 of %" PRIu64 " MiB: %s", bytes / MiB,
			  gk_err(&g, r));
		goto out;
	}
	for (uint64_t i = 0; i < bytes / 8; i++)
		psum += word;
	for (int i = 0; !rc && i < rounds; i++) {
		rc = read_gbps(&g, mp, bytes, reps, msum, &gbps);
		if (gbps > best_m)
			best_m = gbps;
		if (!rc)
			rc = read_gbps(&g, plain, bytes, reps, psum, &gbps);
		if (gbps > best_p)
			best_p = gbps;
	}
	if (!rc)
		printf("PASS: kernel read bandwidth over %" PRIu64 " MiB on %s: received "
		       "managed buffer %.0f GB/s (first read after CPU access %.0f GB/s), "
		       "cuMemAlloc buffer %.0f GB/s, managed/cuMemAlloc %.2f%s\n",
		       bytes / MiB, g.info.name, best_m, cold, best_p, best_m / best_p,
		       best_m < best_p / 2 ? " (below 0.5: managed pages are not read "
					     "from device memory)" : "");
out:
	if (plain)
		g.cu->MemFree(plain);
	zap_msg_release(m);
	gk_close(&g);
	zap_close(t);
	return rc;
}

/* ---- pressure: the pool, full, under device memory pressure ---------------- */

struct delayed_release {
	struct zap_buffer *b;
	double delay;
};

static void *release_later(void *arg)
{
	struct delayed_release *d = arg;
	struct timespec ts = { (time_t)d->delay,
			       (long)((d->delay - (time_t)d->delay) * 1e9) };

	nanosleep(&ts, NULL);
	zap_buffer_release(d->b);
	return NULL;
}

/* zap_buffer_alloc() with a deadline @secs away; @waited gets the time. */
static int alloc_timed(struct zap_transport *t, uint64_t bytes, double secs,
		       struct zap_buffer **b, double *waited)
{
	struct zap_ctx *ctx;
	double t0 = now();
	int rc;

	if (zap_ctx_new(&ctx))
		return -ENOMEM;
	zap_ctx_set_timeout(ctx, (uint64_t)(secs * 1e9));
	rc = zap_buffer_alloc(t, bytes, ctx, b);
	zap_ctx_free(ctx);
	*waited = now() - t0;
	return rc;
}

/* Fill device memory with cuMemAlloc until at most @target bytes are free
 * (or an allocation fails: then as far as it went). */
static int occupy(struct gk *g, size_t target, zcu_ptr *chunks, int max, int *n,
		  size_t *free_after, size_t *total)
{
	size_t fr;
	zcu_result r;

	*n = 0;
	if (!g->cu->MemAlloc)
		return fail("the driver lacks cuMemAlloc_v2");
	for (;;) {
		size_t chunk;

		r = g->MemGetInfo(&fr, total);
		if (r != ZCU_SUCCESS)
			return fail("cuMemGetInfo: %s", gk_err(g, r));
		if (fr <= target || *n == max)
			break;
		chunk = fr - target > 2 * GiB ? GiB : 64 * MiB;
		if (g->cu->MemAlloc(&chunks[*n], chunk) != ZCU_SUCCESS)
			break; /* fragmentation or reserved memory: as far as it goes */
		++*n;
	}
	*free_after = fr;
	return 0;
}

static int step_pressure(struct sender *s)
{
	const uint64_t bytes = 64 * MiB, cap = 4 * bytes, target = 192 * MiB;
	enum { MAX_CHUNKS = 4096 };
	struct zap_pool_stats st = { .size = sizeof(st) };
	struct zap_buffer *b[5] = { NULL };
	struct delayed_release d = { .delay = 0.5 };
	struct zap_msg *m[3] = { NULL };
	char addr[ZAP_PEER_MAX];
	struct zap_transport *t;
	size_t fr = 0, total = 0;
	zcu_ptr *chunks;
	double t0, occ_s, w_timeout, w_release, w_recv;
	int rc, n = 0;
	pthread_t th;
	struct gk g;

	rc = open_uma(bytes, cap, &t, addr, sizeof(addr));
	if (rc)
		return rc;
	rc = gk_open(&g, why, sizeof(why));
	if (rc) {
		zap_close(t);
		printf("%s: %s\n", rc == 77 ? "SKIP" : "FAIL", why);
		return rc;
	}
	chunks = calloc(MAX_CHUNKS, sizeof(*chunks));
	if (!chunks) {
		rc = fail("out of memory");
		goto out;
	}
	t0 = now();
	rc = occupy(&g, target, chunks, MAX_CHUNKS, &n, &fr, &total);
	occ_s = now() - t0;
	if (rc)
		goto out;
	printf("  device memory: %.1f GiB total; %d cuMemAlloc chunks in %.1f s leave "
	       "%.0f MiB free; the pool cap is %" PRIu64 " MiB\n",
	       (double)total / GiB, n, occ_s, (double)fr / MiB, cap / MiB);
	if (fr >= cap) {
		rc = fail("could not fill device memory below the pool cap: %.0f MiB "
			  "free after %d cuMemAlloc chunks", (double)fr / MiB, n);
		goto out;
	}

	/* Fill the pool: the CPU writes each buffer, the GPU checksums it in
	 * place, so managed pages migrate with too little device memory for
	 * all of them. */
	for (int i = 0; i < 4; i++) {
		uint64_t x = 88172645463325252ull + (uint64_t)i, got;
		const char *what;
		zcu_result r;
		double w;
		float ms;

		rc = alloc_timed(t, bytes, 10, &b[i], &w);
		if (rc) {
			rc = fail("pool buffer %d of 4 (cap not reached): %s", i,
				  zap_last_error());
			goto out;
		}
		if (!zap_buffer_device_ptr(b[i])) {
			rc = fail("a uma pool buffer without a device pointer");
			goto out;
		}
		xorshift_fill(zap_buffer_bytes(b[i]), bytes / 8, &x);
		r = gk_run(&g, g.csum, (zcu_ptr)(uintptr_t)zap_buffer_device_ptr(b[i]),
			   bytes, 1, &got, &ms, &what);
		if (r != ZCU_SUCCESS) {
			rc = fail("%s on pool buffer %d under pressure: %s", what, i,
				  gk_err(&g, r));
			goto out;
		}
		if (got != gk_cpu_csum(zap_buffer_bytes(b[i]), bytes / 8)) {
			rc = fail("GPU checksum of pool buffer %d differs from the CPU's", i);
			goto out;
		}
	}
	/* Full: an allocation blocks until its deadline... */
	rc = alloc_timed(t, bytes, 0.3, &b[4], &w_timeout);
	if (rc != -ETIMEDOUT || w_timeout < 0.25) {
		rc = fail("allocating from the full pool gave %d after %.2f s, wanted "
			  "-ETIMEDOUT after 0.3 s", rc, w_timeout);
		goto out;
	}
	/* ...and proceeds when another thread releases a buffer. */
	d.b = b[0];
	if (pthread_create(&th, NULL, release_later, &d)) {
		rc = fail("pthread_create");
		goto out;
	}
	rc = alloc_timed(t, bytes, 20, &b[4], &w_release);
	pthread_join(th, NULL);
	b[0] = NULL;
	if (rc || w_release < 0.4) {
		rc = fail("allocating from the full pool with a release due in 0.5 s "
			  "gave %d after %.2f s: %s", rc, w_release,
			  rc ? zap_last_error() : "did not block");
		goto out;
	}
	/* The receive path: messages wait while the pool is full... */
	if (sender_send(s, addr, bytes, 3, 0x5851f42d4c957f2dull)) {
		rc = fail("cannot reach the sender");
		goto out;
	}
	{
		struct zap_ctx *ctx;
		struct zap_msg *early = NULL;

		if (zap_ctx_new(&ctx)) {
			rc = fail("zap_ctx_new");
			goto out;
		}
		zap_ctx_set_timeout(ctx, 1000000000ull);
		rc = zap_recv(t, ctx, &early);
		zap_ctx_free(ctx);
		if (rc != -ETIMEDOUT) {
			zap_msg_release(early);
			rc = fail("zap_recv gave %d while the pool was full, wanted "
				  "-ETIMEDOUT", rc);
			goto out;
		}
	}
	/* ...and arrive, intact, once buffers are released. */
	t0 = now();
	for (int i = 1; i < 4; i++) {
		zap_buffer_release(b[i]);
		b[i] = NULL;
	}
	for (int i = 0; i < 3; i++) {
		rc = recv_checked(&g, t, s, bytes, 30, &m[i]);
		if (rc)
			goto out;
	}
	w_recv = now() - t0;
	zap_pool_stats(t, &st);
	if (st.waits < 2 || st.owned > cap) {
		rc = fail("pool stats: %" PRIu64 " waits (wanted >= 2), %" PRIu64
			  " bytes owned over the cap %" PRIu64, st.waits, st.owned, cap);
		goto out;
	}
	printf("PASS: with %.0f MiB of device memory free (%d cuMemAlloc chunks) and "
	       "a %" PRIu64 " MiB pool: 4 buffers written by the CPU and checksummed "
	       "by the GPU; the full pool blocked an allocation until its deadline "
	       "(%.2f s) and one until a release (%.2f s); received messages waited "
	       "while it was full and 3/3 arrived, GPU-checksummed, %.2f s after "
	       "release; high water %" PRIu64 " MiB, %" PRIu64 " waits\n",
	       (double)fr / MiB, n, cap / MiB, w_timeout, w_release, w_recv,
	       st.high_water / MiB, st.waits);
	rc = 0;
out:
	for (int i = 0; i < 3; i++)
		zap_msg_release(m[i]);
	for (int i = 0; i < 5; i++)
		zap_buffer_release(b[i]);
	for (int i = 0; chunks && i < n; i++)
		g.cu->MemFree(chunks[i]);
	free(chunks);
	gk_close(&g);
	zap_close(t);
	return rc;
}

/* ---- ptx, symbols ----------------------------------------------------------- */

static int step_symbols(const char *path)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	struct gk g;

	if (!lib) {
		printf("SKIP: %s\n", dlerror());
		return 77;
	}
	memset(&g, 0, sizeof(g));
	if (gk_resolve(&g, lib, why, sizeof(why)))
		return fail("%s: %s", path, why);
	printf("PASS: %s has every entry point the GPU checks call\n", path);
	dlclose(lib);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(struct sender *s);
		unsigned watchdog_s;
	} steps[] = {
		{ "csum", step_csum, 240 },
		{ "bandwidth", step_bandwidth, 120 },
		{ "pressure", step_pressure, 180 },
	};
	const char *step = argc > 1 ? argv[1] : "";
	struct sender s;
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(step, "ptx")) {
		fputs(gk_ptx, stdout);
		return 0;
	}
	if (!strcmp(step, "symbols") && argc == 3)
		return step_symbols(argv[2]);
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		if (strcmp(step, steps[i].name))
			continue;
		/* Fork before libzap or CUDA start threads or driver state. */
		if (sender_start(&s))
			return fail("cannot start the sender: %s", strerror(errno));
		alarm(steps[i].watchdog_s); /* SIGALRM ends a hung step */
		rc = steps[i].fn(&s);
		if (sender_stop(&s) && rc == 0)
			rc = fail("the sender failed (its stderr is above)");
		return rc;
	}
	fprintf(stderr, "usage: %s csum|bandwidth|pressure|ptx|symbols LIB\n", argv[0]);
	return 2;
}
