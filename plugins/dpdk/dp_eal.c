/* SPDX-License-Identifier: MIT */
/*
 * The process-wide DPDK EAL. It starts once per process, at the first
 * open (never in probe), and is never cleaned up: DPDK cannot start it
 * again after rte_eal_cleanup(). A failed start is not retried either (it
 * may leave state behind); its reason is kept for every later open and
 * probe.
 *
 * Shared state, process-wide:
 *   dp_eal_lock  guards dp_eal_st and dp_eal_why, and is held across
 *                rte_eal_init() so that one thread starts the EAL;
 *   dp_log_lock  guards the log redirection: DPDK's log goes through the
 *                host's log (at DEBUG), and its last error lines are kept
 *                (dp_log_err) to explain a failure. Taken inside
 *                dp_eal_lock while the EAL starts.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_log.h>

#include "dp_int.h"

static pthread_mutex_t dp_eal_lock = PTHREAD_MUTEX_INITIALIZER;
static enum dp_eal_state dp_eal_st = DP_EAL_NOT_STARTED;
static int dp_eal_err; /* DP_EAL_FAILED: the error open returns */
static char dp_eal_why[768];

static pthread_mutex_t dp_log_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct zap_host *dp_log_host;
static char dp_log_buf[512];
static size_t dp_log_pos;
static char dp_log_err[2][256];

static void log_line(const char *line)
{
	int lvl = rte_log_cur_msg_loglevel();

	if (lvl > 0 && lvl <= (int)RTE_LOG_ERR) {
		memcpy(dp_log_err[0], dp_log_err[1], sizeof(dp_log_err[0]));
		snprintf(dp_log_err[1], sizeof(dp_log_err[1]), "%.255s", line);
	}
	if (dp_log_host && dp_log_host->log_enabled(ZAP_LOG_DEBUG))
		dp_log_host->log(ZAP_LOG_DEBUG, DP_DOM, "%s", line);
}

static ssize_t log_write(void *cookie, const char *buf, size_t size)
{
	pthread_mutex_lock(&dp_log_lock);
	for (size_t i = 0; i < size; i++) {
		if (buf[i] == '\n' || dp_log_pos == sizeof(dp_log_buf) - 1) {
			dp_log_buf[dp_log_pos] = 0;
			if (dp_log_pos)
				log_line(dp_log_buf);
			dp_log_pos = 0;
			if (buf[i] == '\n')
				continue;
		}
		dp_log_buf[dp_log_pos++] = buf[i];
	}
	pthread_mutex_unlock(&dp_log_lock);
	return (ssize_t)size;
}

void dp_eal_said(char *out, size_t len)
{
	pthread_mutex_lock(&dp_log_lock);
	if (dp_log_err[0][0])
		snprintf(out, len, "%s / %s", dp_log_err[0], dp_log_err[1]);
	else
		snprintf(out, len, "%s",
			 dp_log_err[1][0] ? dp_log_err[1] : "(nothing logged)");
	pthread_mutex_unlock(&dp_log_lock);
}

enum dp_eal_state dp_eal_state(char *why, size_t len)
{
	enum dp_eal_state st;

	pthread_mutex_lock(&dp_eal_lock);
	st = dp_eal_st;
	if (st == DP_EAL_FAILED)
		snprintf(why, len, "%s", dp_eal_why);
	pthread_mutex_unlock(&dp_eal_lock);
	return st;
}

/* Send DPDK's log through the host's, unless the application has pointed
 * it somewhere itself. dp_eal_lock held. */
static void log_redirect(const struct zap_host *h)
{
	dp_log_host = h;
	if (!rte_log_get_stream() || rte_log_get_stream() == stderr) {
		FILE *f = fopencookie(NULL, "w",
				      (cookie_io_functions_t){ .write = log_write });

		if (f) {
			setvbuf(f, NULL, _IOLBF, 0);
			rte_openlog_stream(f);
		}
	}
}

/* rte_eal_init() on the EAL arguments: 0 or an error with dp_eal_why set.
 * dp_eal_lock held. */
static int eal_init(const struct zap_host *h, const struct dp_conf *c)
{
	char buf[1024], *argv[DP_MAX_ARGS + 1], said[520], msg[1700];
	cpu_set_t saved;
	int argc, rc, saved_ok;
	size_t n;

	snprintf(buf, sizeof(buf), "%s", c->eal);
	argc = dp_split_args(buf, argv, DP_MAX_ARGS + 1);
	if (argc < 0) {
		snprintf(dp_eal_why, sizeof(dp_eal_why),
			 "ZAP_DPDK_EAL_ARGS has too many words");
		return -EINVAL;
	}
	/* rte_eal_init() pins the calling thread to the main lcore: that is
	 * the application's thread, so its affinity is put back; only the
	 * transport's own service thread runs on the EAL's core. */
	saved_ok = !pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved);
	rc = rte_eal_init(argc, argv);
	if (saved_ok)
		pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
	if (rc < 0) {
		int e = rte_errno;

		dp_eal_said(said, sizeof(said));
		snprintf(msg, sizeof(msg),
			 "rte_eal_init(\"%s\") failed: %s; EAL said: %s", c->eal,
			 rte_strerror(e), said);
		/* Kept to the first sizeof(dp_eal_why) - 1 bytes. */
		n = strlen(msg) < sizeof(dp_eal_why) ? strlen(msg)
						     : sizeof(dp_eal_why) - 1;
		memcpy(dp_eal_why, msg, n);
		dp_eal_why[n] = 0;
		h->log(ZAP_LOG_ERROR, DP_DOM, "%s", dp_eal_why);
		return ZAP_ENOTAVAIL;
	}
	return 0;
}

int dp_eal_start(const struct zap_host *h, const struct dp_conf *c)
{
	int rc;

	pthread_mutex_lock(&dp_eal_lock);
	if (dp_eal_st != DP_EAL_NOT_STARTED) {
		rc = dp_eal_st == DP_EAL_FAILED ? dp_eal_err : 0;
		pthread_mutex_unlock(&dp_eal_lock);
		return rc ? h->fail(rc, "dpdk: %s", dp_eal_why) : 0;
	}
	log_redirect(h);
	rc = eal_init(h, c);
	dp_eal_st = rc ? DP_EAL_FAILED : DP_EAL_RUNNING;
	dp_eal_err = rc;
	pthread_mutex_unlock(&dp_eal_lock);
	return rc ? h->fail(rc, "dpdk: %s", dp_eal_why) : 0;
}
