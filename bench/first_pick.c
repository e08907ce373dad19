/* SPDX-License-Identifier: MIT */
/*
 * The cost of the first zap_pick() in a process: the plugin scan, every
 * probe and opening the winner (bench/first-pick.sh runs it many times in
 * fresh processes). Prints one line: "<ms> <transport>".
 */
#include <stdio.h>
#include <time.h>

#include <zap/zap.h>

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	const char *pref = argc > 1 ? argv[1] : NULL;
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *t = NULL;
	double t0 = now_ms(), ms;
	int rc = zap_pick(pref, 0, &attr, &t);

	ms = now_ms() - t0;
	if (rc) {
		fprintf(stderr, "first_pick: %s\n", zap_strerror(rc));
		return 1;
	}
	printf("%.3f %s\n", ms, zap_transport_name(t));
	zap_close(t);
	return 0;
}
