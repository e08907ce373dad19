/* SPDX-License-Identifier: MIT */
/*
 * The uma probe on a host without a working CUDA driver, for each failure
 * step that can be produced without a GPU:
 *   no-driver: no libcuda.so.1 at all            -> "libcuda.so.1 not found"
 *   stub:      the toolkit's stub library posing -> "cuInit failed:
 *              as libcuda.so.1 (every call fails)   CUDA_ERROR_STUB_LIBRARY"
 * Each must give NOT_PRESENT with that reason, and auto pick must fall
 * back to default. The plugin is loaded from the build tree
 * (ZAP_PLUGIN_PATH, set by meson).
 *
 * LD_LIBRARY_PATH is read only at process start, so the stub case re-runs
 * this program with it pointing at a directory holding the symlink.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zap/zap.h>

#define STUB "/usr/local/cuda/lib64/stubs/libcuda.so"

static int fail(const char *what)
{
	fprintf(stderr, "FAIL: %s\n", what);
	return 1;
}

static int check(const char *expect)
{
	struct zap_report_entry e = { .size = sizeof(e) };
	struct zap_choice c = { .size = sizeof(c) };
	struct zap_transport *t = NULL;
	int n = zap_report_count(), found = 0, rc;

	for (int i = 0; i < n; i++) {
		if (zap_report_get((size_t)i, &e))
			return fail("zap_report_get");
		if (strcmp(e.name, "uma"))
			continue;
		found = 1;
		printf("uma: %s: %s\n", zap_plugin_state_name(e.state), e.reason);
		if (e.state != ZAP_PLUGIN_NOT_PRESENT)
			return fail("uma is not 'not present'");
		if (!strstr(e.reason, expect))
			return fail("uma's reason lacks the failed step");
	}
	if (!found)
		return fail("no uma row in the load report (ZAP_PLUGIN_PATH?)");
	/* Auto pick moves on to default... */
	if (zap_pick_explain("", 0, &c) || strcmp(c.name, "default"))
		return fail("auto pick did not fall back to default");
	/* ...a strict request says why... */
	rc = zap_pick("=uma", 0, NULL, &t);
	if (rc != ZAP_ENOTAVAIL || !strstr(zap_strerror(rc), expect))
		return fail("strict uma pick did not fail with the reason");
	printf("strict: %s\n", zap_strerror(rc));
	/* ...and a plain request falls back with a working transport. */
	rc = zap_pick("uma", 0, &(struct zap_attr){ .size = sizeof(struct zap_attr),
						    .listen = "127.0.0.1:0" }, &t);
	if (rc || strcmp(zap_transport_name(t), "default"))
		return fail("uma request did not fall back to default");
	zap_close(t);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "no-driver")) {
		void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

		if (h) {
			printf("SKIP: libcuda.so.1 is installed here; this case needs a host without a CUDA driver\n");
			return 77;
		}
		return check("libcuda.so.1 not found");
	}
	if (!strcmp(mode, "stub")) {
		char dir[] = "/tmp/zap-cudastub-XXXXXX", link[64];

		if (access(STUB, R_OK)) {
			printf("SKIP: the CUDA toolkit's stub library %s is missing\n", STUB);
			return 77;
		}
		if (!mkdtemp(dir))
			return fail("mkdtemp");
		snprintf(link, sizeof(link), "%s/libcuda.so.1", dir);
		if (symlink(STUB, link))
			return fail("symlink");
		setenv("LD_LIBRARY_PATH", dir, 1);
		execl("/proc/self/exe", argv[0], "stub-child", link, (char *)NULL);
		return fail("exec");
	}
	if (!strcmp(mode, "stub-child")) {
		int rc = check("cuInit failed: CUDA_ERROR_STUB_LIBRARY");
		char dir[64];

		snprintf(dir, sizeof(dir), "%s", argv[2]);
		unlink(argv[2]);
		*strrchr(dir, '/') = '\0';
		rmdir(dir);
		return rc;
	}
	fprintf(stderr, "usage: %s no-driver|stub\n", argv[0]);
	return 2;
}
