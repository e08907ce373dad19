/* SPDX-License-Identifier: MIT */
/*
 * The gpudirect probe, with the plugin loaded from the build tree
 * (ZAP_PLUGIN_PATH, set by meson). A plugin that does not load, or whose
 * probe says ERROR where it should not, fails the test; nothing skips.
 *   absent:  on a host without RDMA devices, NOT_PRESENT with the exact
 *            reason (here: the kernel has no RDMA support), auto pick moves
 *            on to default, a strict request fails with the reason, a
 *            plain one falls back. On a host with RDMA devices the absent
 *            case cannot be staged: the probe must find them (LOADED, or
 *            NOT_PRESENT for another reason such as no GPU), and
 *            test-gd-datapath covers the rest.
 *   bad-env: a malformed ZAP_GPUDIRECT_DEVICE is an ERROR naming it, on
 *            any host (it is checked before any device is looked at).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>
#include <zap/zap.h>

static int fail(const char *what)
{
	fprintf(stderr, "FAIL: %s\n", what);
	return 1;
}

static int row(struct zap_report_entry *e)
{
	int n = zap_report_count();

	for (int i = 0; i < n; i++) {
		if (zap_report_get((size_t)i, e))
			return -1;
		if (!strcmp(e->name, "gpudirect"))
			return 0;
	}
	return -1;
}

/* A host with RDMA devices: the probe found them and did not fail. */
static int devices_present(int n)
{
	struct zap_report_entry e = { .size = sizeof(e) };

	if (row(&e))
		return fail("no gpudirect row in the load report (ZAP_PLUGIN_PATH?)");
	printf("this host has %d RDMA device(s); gpudirect: %s: %s\n", n,
	       zap_plugin_state_name(e.state), e.reason);
	if (e.state == ZAP_PLUGIN_LOADED)
		return 0;
	if (e.state != ZAP_PLUGIN_NOT_PRESENT)
		return fail("gpudirect is neither 'loaded' nor 'not present'");
	if (!strncmp(e.reason, "no RDMA device", 14))
		return fail("the probe missed this host's RDMA devices");
	return 0;
}

static int bad_env(void)
{
	struct zap_report_entry e = { .size = sizeof(e) };

	setenv("ZAP_GPUDIRECT_DEVICE", "mlx5 0:x", 1);
	if (row(&e))
		return fail("no gpudirect row in the load report (ZAP_PLUGIN_PATH?)");
	printf("gpudirect: %s: %s\n", zap_plugin_state_name(e.state), e.reason);
	if (e.state != ZAP_PLUGIN_ERROR || !strstr(e.reason, "ZAP_GPUDIRECT_DEVICE"))
		return fail("a bad ZAP_GPUDIRECT_DEVICE is not an error naming it");
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "absent";
	struct zap_report_entry e = { .size = sizeof(e) };
	struct zap_choice c = { .size = sizeof(c) };
	struct zap_transport *t = NULL;
	char expect[256];
	struct ibv_device **list;
	int n = 0, rc;

	if (!strcmp(mode, "bad-env"))
		return bad_env();
	errno = 0;
	list = ibv_get_device_list(&n);
	if (list && n) {
		ibv_free_device_list(list);
		return devices_present(n);
	}
	if (!list && errno == ENOSYS)
		snprintf(expect, sizeof(expect), "no RDMA device: ibv_get_device_list "
			 "failed with ENOSYS (%s): the kernel has no RDMA support",
			 strerror(ENOSYS));
	else if (!list)
		snprintf(expect, sizeof(expect), "no RDMA device: ibv_get_device_list "
			 "failed: %s", strerror(errno));
	else
		snprintf(expect, sizeof(expect), "no RDMA device (ibv_get_device_list found none)");
	if (list)
		ibv_free_device_list(list);

	if (row(&e))
		return fail("no gpudirect row in the load report (ZAP_PLUGIN_PATH?)");
	printf("gpudirect: %s: %s\n", zap_plugin_state_name(e.state), e.reason);
	if (e.state != ZAP_PLUGIN_NOT_PRESENT)
		return fail("gpudirect is not 'not present'");
	if (strcmp(e.reason, expect))
		return fail("gpudirect's reason is not the expected one");
	if (zap_pick_explain("", 0, &c) || !strcmp(c.name, "gpudirect"))
		return fail("auto pick did not move on");
	printf("auto pick: %s\n", c.name);
	rc = zap_pick("=gpudirect", 0, NULL, &t);
	if (rc != ZAP_ENOTAVAIL || !strstr(zap_strerror(rc), expect))
		return fail("strict gpudirect pick did not fail with the reason");
	printf("strict: %s\n", zap_strerror(rc));
	rc = zap_pick("gpudirect", 0,
		      &(struct zap_attr){ .size = sizeof(struct zap_attr),
					  .listen = "127.0.0.1:0" }, &t);
	if (rc || !strcmp(zap_transport_name(t), "gpudirect"))
		return fail("a gpudirect request did not fall back");
	printf("fallback: %s\n", zap_transport_name(t));
	zap_close(t);
	return 0;
}
