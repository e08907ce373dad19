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
 *
 * A case skips (exit 77, naming what is missing) only where this host
 * cannot produce it (a CUDA driver is installed; the stub library is
 * absent), and even then only after the uma plugin was found, loaded and
 * probed to LOADED or NOT_PRESENT: a plugin that is missing, failed to
 * load, or whose probe said ERROR fails the test.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zap/zap.h>

#include "zap-test.h"

#define STUB "/usr/local/cuda/lib64/stubs/libcuda.so"

static int fail(const char *what)
{
	fprintf(stderr, "FAIL: %s\n", what);
	return 1;
}

/* The uma row into @e, printed; 1 (after FAIL) when there is none. */
static int uma_row(struct zap_report_entry *e)
{
	if (zt_plugin_row("uma", e))
		return fail("no uma row in the load report (ZAP_PLUGIN_PATH?)");
	printf("uma: %s: %s\n", zap_plugin_state_name(e->state), e->reason);
	return 0;
}

/* Before a skip: the plugin itself must be sound (loaded or not present). */
static int plugin_sound(void)
{
	struct zap_report_entry e = { .size = sizeof(e) };

	if (uma_row(&e))
		return 1;
	if (e.state != ZAP_PLUGIN_LOADED && e.state != ZAP_PLUGIN_NOT_PRESENT)
		return fail("the uma plugin failed to load or its probe said ERROR");
	return 0;
}

static int check(const char *expect)
{
	struct zap_report_entry e = { .size = sizeof(e) };
	struct zap_choice c = { .size = sizeof(c) };
	struct zap_transport *t = NULL;
	int rc;

	if (uma_row(&e))
		return 1;
	if (e.state != ZAP_PLUGIN_NOT_PRESENT)
		return fail("uma is not 'not present'");
	if (!strstr(e.reason, expect))
		return fail("uma's reason lacks the failed step");
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
			char path[PATH_MAX] = "?";

			dlinfo(h, RTLD_DI_ORIGIN, path);
			dlclose(h);
			if (plugin_sound())
				return 1;
			printf("SKIP: needs a host without a CUDA driver; libcuda.so.1 "
			       "is installed here (in %s)\n", path);
			return ZT_SKIP;
		}
		return check("libcuda.so.1 not found");
	}
	if (!strcmp(mode, "stub")) {
		char dir[PATH_MAX], link[PATH_MAX + 16];

		if (access(STUB, R_OK)) {
			int err = errno;

			if (plugin_sound())
				return 1;
			printf("SKIP: needs the CUDA toolkit's stub library %s: %s\n",
			       STUB, strerror(err));
			return ZT_SKIP;
		}
		if (!zt_mkdtemp(dir, sizeof(dir), "zap-cudastub"))
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
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s", argv[2]);
		*strrchr(dir, '/') = '\0';
		zt_rmtree(dir);
		return rc;
	}
	fprintf(stderr, "usage: %s no-driver|stub\n", argv[0]);
	return 2;
}
