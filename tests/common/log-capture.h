/* SPDX-License-Identifier: MIT */
/*
 * Capturing libzap's log in a buffer that a test searches: what a peer
 * was refused for, or that nothing went wrong, is said only in the log.
 *
 * One buffer per test program (each includes this header once), guarded
 * by zt_log_mu because the wire logs from its own threads. A test installs
 * zt_log_capture() with zap_set_log_handler(), or its own handler that
 * filters differently and calls zt_log_add(). A test may read zt_log_buf
 * and zt_log_len itself while it holds zt_log_mu.
 *
 * Static, like zap-test.h, so that nothing extra is linked; the names
 * start with zt_ / ZT_.
 */
#ifndef ZAP_TEST_LOG_CAPTURE_H
#define ZAP_TEST_LOG_CAPTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <zap/zap.h>

static pthread_mutex_t zt_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char zt_log_buf[1 << 16];
static size_t zt_log_len;

/** zt_log_add() - append "@domain: @msg\n" to the buffer. */
static inline void zt_log_add(const char *domain, const char *msg)
{
	pthread_mutex_lock(&zt_log_mu);
	int n = snprintf(zt_log_buf + zt_log_len, sizeof(zt_log_buf) - zt_log_len,
			 "%s: %s\n", domain, msg);
	if (n > 0 && zt_log_len + (size_t)n < sizeof(zt_log_buf))
		zt_log_len += (size_t)n;
	else
		zt_log_len = 0; /* full: start over, tests look at recent lines */
	pthread_mutex_unlock(&zt_log_mu);
}

/** zt_log_capture() - a log handler: keep INFO and worse, drop the rest. */
static inline void zt_log_capture(enum zap_log_level level, const char *domain,
				  const char *msg, void *user)
{
	(void)user;
	if (level > ZAP_LOG_INFO)
		return;
	zt_log_add(domain, msg);
}

/** zt_log_clear() - forget everything captured so far. */
static inline void zt_log_clear(void)
{
	pthread_mutex_lock(&zt_log_mu);
	zt_log_len = 0;
	zt_log_buf[0] = '\0';
	pthread_mutex_unlock(&zt_log_mu);
}

/* Whether the buffer holds @a, or with @per_line a line that holds @a and
 * (when not NULL) @b. Called with zt_log_mu held. */
static inline bool zt_log_has_(const char *a, const char *b, bool per_line)
{
	zt_log_buf[zt_log_len] = '\0';
	if (!per_line)
		return strstr(zt_log_buf, a) != NULL;
	bool found = false;
	for (char *l = zt_log_buf; l && *l && !found;) {
		char *e = strchr(l, '\n');
		size_t n = e ? (size_t)(e - l) : strlen(l);
		char line[1024];
		snprintf(line, sizeof(line), "%.*s", (int)n, l);
		found = strstr(line, a) && (!b || strstr(line, b));
		l = e ? e + 1 : NULL;
	}
	return found;
}

static inline bool zt_log_wait_(const char *a, const char *b, bool per_line,
				unsigned ms)
{
	for (unsigned i = 0; i < ms / 10; i++) {
		pthread_mutex_lock(&zt_log_mu);
		bool found = zt_log_has_(a, b, per_line);
		pthread_mutex_unlock(&zt_log_mu);
		if (found)
			return true;
		usleep(10000);
	}
	if (per_line)
		fprintf(stderr, "log lacks \"%s\"+\"%s\"; captured:\n%s", a,
			b ? b : "", zt_log_buf);
	else
		fprintf(stderr, "log lacks \"%s\"; captured:\n%s", a, zt_log_buf);
	return false;
}

/**
 * zt_log_wait() - wait up to @ms milliseconds (polling every 10 ms) for
 * @s anywhere in the captured log. On a timeout print what was captured
 * on stderr.
 */
static inline bool zt_log_wait(const char *s, unsigned ms)
{
	return zt_log_wait_(s, NULL, false, ms);
}

/** zt_log_has() - whether @s was captured, now (no wait, no output). */
static inline bool zt_log_has(const char *s)
{
	pthread_mutex_lock(&zt_log_mu);
	bool found = zt_log_has_(s, NULL, false);
	pthread_mutex_unlock(&zt_log_mu);
	return found;
}

/**
 * zt_log_wait_line() - like zt_log_wait(), for one captured line that
 * contains both @a and @b (just @a when @b is NULL): a refusal and the
 * peer it names, say, not two different lines.
 */
static inline bool zt_log_wait_line(const char *a, const char *b, unsigned ms)
{
	return zt_log_wait_(a, b, true, ms);
}

#endif /* ZAP_TEST_LOG_CAPTURE_H */
