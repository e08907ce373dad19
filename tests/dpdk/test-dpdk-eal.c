/* SPDX-License-Identifier: MIT */
/*
 * The dpdk transport on the real EAL in one process, one case per run (the
 * EAL starts once per process), chosen by argv[1]:
 *
 *   unconfigured  probe NOT_PRESENT "not configured", auto pick moves on
 *   bad-value     a bad ZAP_DPDK_* value: probe ERROR naming the variable
 *   bad-vdev      --vdev=net_bogus0: probe ERROR naming it (checked against
 *                 the installed drivers without starting the EAL)
 *   bad-option    an option only the EAL knows is wrong: probe OK, open
 *                 fails with rte_eal_init's reason and the EAL's log line
 *   bad-vdev-args an installed driver refusing its arguments: open fails
 *                 (no such port) quoting the driver's complaint
 *   tls-partial   a TLS key, CA or pins without a certificate: open
 *                 refuses with the message every transport gives
 *   no-huge       no --no-huge on a host without hugepages: probe ERROR
 *                 (skipped, 77, where hugepages of any size are free: the
 *                 same count the probe makes)
 *   loop          net_ring loopback (a port whose transmit ring is its
 *                 receive ring): messages to our own address of 0 B, one
 *                 frame (zero copy), many frames; a second open of the
 *                 busy port is refused; close, then a later open in the
 *                 same process works again; probe after the EAL started
 *                 says so; messages held across close stay valid.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>

#include "dp-test.h"

#define LOOP_EAL "--no-huge --no-shconf -l 0 -m 256 --no-pci --no-telemetry " \
		 "--vdev=net_ring0 --file-prefix=zapdploop%d"

static void base_env(void)
{
	setenv("ZAP_TRANSPORT_QUIET", "1", 1);
	setenv("ZAP_DPDK_IP", "10.99.0.1", 1);
	setenv("ZAP_DPDK_UDP_PORT", "4242", 1);
}

static int report(const char *name, struct zap_report_entry *out)
{
	int n = zap_report_count();

	for (int i = 0; i < n; i++) {
		struct zap_report_entry e = { .size = sizeof(e) };

		if (zap_report_get((size_t)i, &e) == 0 && !strcmp(e.name, name)) {
			*out = e;
			printf("# %s: %s: %s\n", name, zap_plugin_state_name(e.state), e.reason);
			return 0;
		}
	}
	return -1;
}

static int t_unconfigured(void)
{
	struct zap_report_entry e;
	struct zap_choice c = { .size = sizeof(c) };
	struct zap_transport *t = NULL;
	int rc;

	unsetenv("ZAP_DPDK_EAL_ARGS");
	CHECK(report("dpdk", &e) == 0, "no dpdk row (ZAP_PLUGIN_PATH?)");
	CHECK(e.state == ZAP_PLUGIN_NOT_PRESENT, "state %s", zap_plugin_state_name(e.state));
	CHECK(strstr(e.reason, "not configured") && strstr(e.reason, "ZAP_DPDK_EAL_ARGS"),
	      "reason: %s", e.reason);
	CHECK(zap_pick_explain("", 0, &c) == 0 && strcmp(c.name, "dpdk"), "auto picked dpdk");
	rc = zap_pick("=dpdk", 0, NULL, &t);
	CHECK(rc == ZAP_ENOTAVAIL && strstr(zap_strerror(rc), "not configured"), "strict: %s",
	      zap_strerror(rc));
	return 0;
}

static int t_bad_value(void)
{
	struct zap_report_entry e;

	setenv("ZAP_DPDK_EAL_ARGS", "--no-huge --vdev=net_ring0", 1);
	setenv("ZAP_DPDK_DROP_RX", "1.5", 1);
	CHECK(report("dpdk", &e) == 0, "no dpdk row");
	CHECK(e.state == ZAP_PLUGIN_ERROR && strstr(e.reason, "ZAP_DPDK_DROP_RX"), "%s: %s",
	      zap_plugin_state_name(e.state), e.reason);
	return 0;
}

static void expect_open_fails(const char *n1, const char *n2)
{
	struct zap_transport *t = NULL;
	int rc = zap_pick("=dpdk", 0, NULL, &t);
	const char *why = zap_strerror(rc);

	printf("# open: %d %s\n", rc, why);
	CHECK(rc < 0, "open succeeded");
	CHECK(strstr(why, n1) && strstr(why, n2), "reason lacks \"%s\"/\"%s\": %s", n1, n2,
	      why);
}

static void probe_expect(enum zap_plugin_state st, const char *n1, const char *n2)
{
	struct zap_report_entry e;

	CHECK(report("dpdk", &e) == 0, "no dpdk row (ZAP_PLUGIN_PATH?)");
	CHECK(e.state == st && strstr(e.reason, n1) && strstr(e.reason, n2), "%s: %s",
	      zap_plugin_state_name(e.state), e.reason);
}

static void set_eal(const char *fmt)
{
	char eal[320];

	snprintf(eal, sizeof(eal), fmt, (int)getpid());
	setenv("ZAP_DPDK_EAL_ARGS", eal, 1);
}

/* Probe may not start the EAL, so it checks what it can without it: every
 * --vdev names an installed driver. The strict pick then fails with that. */
static int t_bad_vdev(void)
{
	set_eal("--no-huge --no-shconf -l 0 --no-pci --no-telemetry --vdev=net_bogus0 "
		"--file-prefix=zapdpbad%d");
	probe_expect(ZAP_PLUGIN_ERROR, "net_bogus0", "no DPDK driver");
	expect_open_fails("net_bogus0", "no DPDK driver");
	return 0;
}

/* What only the EAL can judge passes probe and fails at open with the
 * EAL's own words; later opens repeat them without restarting it. */
static int t_bad_option(void)
{
	set_eal("--no-huge --no-shconf -l 0 --no-pci --no-telemetry --not-an-eal-option "
		"--file-prefix=zapdpopt%d");
	probe_expect(ZAP_PLUGIN_LOADED, "configured", "EAL starts at open");
	expect_open_fails("rte_eal_init", "EAL said");
	expect_open_fails("rte_eal_init", "EAL said");
	return 0;
}

/* A key, CA or pins without a certificate: refused as every transport
 * refuses it, before the EAL starts, never run in plaintext. */
static int t_tls_partial(void)
{
	static const char *const vars[] = { "tls_key", "tls_ca", "tls_peers" };
	struct zap_transport *t = NULL;

	int rc;

	set_eal("--no-huge --no-shconf -l 0 --no-pci --no-telemetry --not-an-eal-option "
		"--file-prefix=zapdptls%d");
	/* From the environment (read once, at the first pick)... */
	setenv("ZAP_TLS_KEY", "/nonexistent/key", 1);
	probe_expect(ZAP_PLUGIN_LOADED, "configured", "EAL starts at open");
	rc = zap_pick("=dpdk", 0, NULL, &t);
	printf("# ZAP_TLS_KEY alone: %d %s\n", rc, zap_strerror(rc));
	CHECK(rc == -EINVAL && strstr(zap_strerror(rc), "refusing to run in plaintext"),
	      "ZAP_TLS_KEY alone: %d %s", rc, zap_strerror(rc));
	/* ...and from zap_attr. */
	for (int i = 0; i < 3; i++) {

		/* zap_attr: the environment was read at the first pick. */
		struct zap_attr a = { .size = sizeof(a),
				      .tls_key = i == 0 ? "/nonexistent/key" : NULL,
				      .tls_ca = i == 1 ? "/nonexistent/ca" : NULL,
				      .tls_peers = i == 2 ? "/nonexistent/peers" : NULL };

		rc = zap_pick("=dpdk", 0, &a, &t);
		printf("# %s alone: %d %s\n", vars[i], rc, zap_strerror(rc));
		CHECK(rc == -EINVAL, "%s alone: open returned %d", vars[i], rc);
		CHECK(strstr(zap_strerror(rc), "set without ZAP_TLS_CERT: refusing to run in "
						"plaintext"),
		      "%s alone: %s", vars[i], zap_strerror(rc));
	}
	printf("ok - tls-partial\n");
	return 0;
}

/* A driver that exists but rejects its arguments: the EAL starts without
 * the port, and open says so with the driver's complaint. */
static int t_bad_vdev_args(void)
{
	set_eal("--no-huge --no-shconf -l 0 -m 128 --no-pci --no-telemetry "
		"--vdev=net_memif0,role=bogus --file-prefix=zapdpargs%d");
	probe_expect(ZAP_PLUGIN_LOADED, "configured", "EAL starts at open");
	expect_open_fails("no such port", "EAL said");
	return 0;
}

/* Free hugepages of every size, counted as the plugin's probe counts them
 * (/sys/kernel/mm/hugepages/<size>/free_hugepages), each size with some
 * free printed. */
static unsigned long free_hugepages(void)
{
	DIR *dir = opendir("/sys/kernel/mm/hugepages");
	unsigned long total = 0;
	struct dirent *de;

	if (!dir)
		return 0;
	while ((de = readdir(dir))) {
		char path[512];
		unsigned long n = 0;
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/%s/free_hugepages",
			 de->d_name);
		f = fopen(path, "r");
		if (f && fscanf(f, "%lu", &n) == 1 && n) {
			total += n;
			printf("# %s: %lu free\n", de->d_name, n);
		}
		if (f)
			fclose(f);
	}
	closedir(dir);
	return total;
}

/* The prerequisite is a host without free hugepages: where some are free,
 * the probe rightly passes, and this case cannot be run (77, saying so). */
static int t_no_huge(void)
{
	unsigned long total = free_hugepages();

	if (total > 0) {
		printf("SKIP: %lu free hugepages here; this case needs a host without them\n",
		       total);
		return 77;
	}
	set_eal("--no-shconf -l 0 --no-pci --no-telemetry --vdev=net_ring0 "
		"--file-prefix=zapdpnohuge%d");
	probe_expect(ZAP_PLUGIN_ERROR, "hugepages", "--no-huge");
	expect_open_fails("hugepages", "--no-huge");
	return 0;
}

static void self_roundtrip(struct zap_transport *t, size_t len, uint64_t seq)
{
	char addr[ZAP_PEER_MAX];
	struct zap_ctx *ctx = dpt_timeout(10000);
	struct zap_msg *m = NULL;
	uint8_t *b = malloc(len ? len : 1);
	int rc;

	CHECK(zap_transport_address(t, addr, sizeof(addr)) == 0, "address");
	CHECK(!strcmp(addr, "10.99.0.1:4242"), "address %s", addr);
	dpt_fill(b, len, seq);
	rc = zap_send(t, addr, b, len, ctx);
	CHECK_RC(rc, "send to self");
	rc = zap_recv(t, ctx, &m);
	CHECK_RC(rc, "recv from self");
	CHECK(zap_msg_len(m) == len, "len %zu want %zu", zap_msg_len(m), len);
	CHECK(dpt_check(zap_msg_data(m), len, seq) == 0, "bytes of %zu", len);
	CHECK(!strcmp(zap_msg_peer(m), addr), "peer %s", zap_msg_peer(m));
	zap_msg_release(m);
	zap_ctx_free(ctx);
	free(b);
}

static int t_loop(void)
{
	struct zap_transport *t = NULL, *t2 = NULL;
	struct zap_report_entry e;
	struct zap_caps caps = { .size = sizeof(caps) };
	struct zap_msg *held = NULL;
	struct zap_ctx *ctx;
	struct zap_buffer *buf = NULL;
	char eal[256], addr[64];
	int rc;

	snprintf(eal, sizeof(eal), LOOP_EAL, (int)getpid());
	setenv("ZAP_DPDK_EAL_ARGS", eal, 1);
	CHECK(report("dpdk", &e) == 0 && e.state == ZAP_PLUGIN_LOADED, "probe not OK");
	CHECK(strstr(e.reason, "EAL starts at open"), "probe: %s", e.reason);
	dpt_open(&t);
	CHECK(zap_caps(t, &caps) == 0 && caps.max_msg_size == ZAP_DEFAULT_MAX_MSG_BYTES,
	      "caps max %llu", (unsigned long long)caps.max_msg_size);
	self_roundtrip(t, 0, 1);
	self_roundtrip(t, 1, 2);
	self_roundtrip(t, 1400, 3);
	self_roundtrip(t, 1448, 4);
	self_roundtrip(t, 1449, 5);
	self_roundtrip(t, 100000, 6);
	self_roundtrip(t, 3u << 20, 7);
	/* Hugepage (here --no-huge) memory from the transport's pool. */
	rc = zap_buffer_alloc(t, 4096, NULL, &buf);
	CHECK_RC(rc, "zap_buffer_alloc");
	memset(zap_buffer_bytes(buf), 7, 4096);
	zap_buffer_release(buf);
	/* The port is taken: a second instance is refused, with the reason. */
	rc = zap_pick("=dpdk", 0, NULL, &t2);
	CHECK(rc == -EBUSY && strstr(zap_strerror(rc), "in use"), "second open: %s",
	      zap_strerror(rc));
	/* Keep one single-frame message across close: it must stay valid. */
	zap_transport_address(t, addr, sizeof(addr));
	ctx = dpt_timeout(10000);
	CHECK_RC(zap_send(t, addr, "held", 4, ctx), "send");
	CHECK_RC(zap_recv(t, ctx, &held), "recv");
	zap_ctx_free(ctx);
	zap_close(t);
	CHECK(zap_msg_len(held) == 4 && !memcmp(zap_msg_data(held), "held", 4), "held msg");
	zap_msg_release(held);
	/* The EAL runs now: probe says so (in a rescan-free way: explain). */
	/* Open again in the same process: the port restarts. */
	dpt_open(&t);
	self_roundtrip(t, 10, 8);
	self_roundtrip(t, 20000, 9);
	zap_close(t);
	dpt_open(&t);
	self_roundtrip(t, 5, 10);
	zap_close(t);
	printf("ok - loop\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	dpt_who = mode;
	base_env();
	if (!strcmp(mode, "unconfigured"))
		return t_unconfigured();
	if (!strcmp(mode, "bad-value"))
		return t_bad_value();
	if (!strcmp(mode, "bad-vdev"))
		return t_bad_vdev();
	if (!strcmp(mode, "bad-option"))
		return t_bad_option();
	if (!strcmp(mode, "bad-vdev-args"))
		return t_bad_vdev_args();
	if (!strcmp(mode, "tls-partial"))
		return t_tls_partial();
	if (!strcmp(mode, "no-huge"))
		return t_no_huge();
	if (!strcmp(mode, "loop"))
		return t_loop();
	fprintf(stderr, "usage: %s unconfigured|bad-value|bad-vdev|bad-option|bad-vdev-args|tls-partial|no-huge|loop\n", argv[0]);
	return 2;
}
