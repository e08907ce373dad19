/* SPDX-License-Identifier: MIT */
/*
 * secure-scan DIR: scan DIR (as the program's own plugin path, honoured
 * under AT_SECURE, unlike ZAP_PLUGIN_PATH) in this process and print the
 * load report, one "name | state | reason" line per row, after
 * "AT_SECURE=<0|1>", then "env NAME | source" (enum zap_env_source) for
 * each ZAP_* variable set, and "pick default | rc | reason". test-probe
 * runs a copy of it with a file capability as an unprivileged user, with
 * ZAP_* variables set by that caller.
 */
#include <stdio.h>
#include <sys/auxv.h>

#include <zap/zap.h>

int main(int argc, char **argv)
{
	struct zap_scan_attr sa = { .size = sizeof(sa), .flags = ZAP_SCAN_INPROCESS };
	int n, err;

	if (argc != 2) {
		fprintf(stderr, "usage: secure-scan DIR\n");
		return 2;
	}
	sa.plugin_path = argv[1];
	printf("AT_SECURE=%lu\n", getauxval(AT_SECURE));
	err = zap_scan(&sa);
	if (err) {
		fprintf(stderr, "zap_scan: %s\n", zap_strerror(err));
		return 1;
	}
	n = zap_report_count();
	for (int i = 0; i < n; i++) {
		struct zap_report_entry e = { .size = sizeof(e) };

		if (zap_report_get((size_t)i, &e))
			return 1;
		printf("%s | %s | %s\n", e.name, zap_plugin_state_name(e.state), e.reason);
	}
	/* The registry as this program sees it, and a pick of default,
	 * which must fail when a ZAP_TLS_* variable cannot be honoured. */
	for (size_t i = 0; i < zap_env_count(); i++) {
		struct zap_env_entry e = { .size = sizeof(e) };

		if (!zap_env_get(i, &e) && e.value)
			printf("env %s | %d\n", e.name, e.source);
	}
	struct zap_transport *t = NULL;
	err = zap_pick("default", 0, NULL, &t);
	printf("pick default | %d | %s\n", err, err ? zap_strerror(err) : "ok");
	zap_close(t);
	return 0;
}
