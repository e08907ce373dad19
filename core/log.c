/* SPDX-License-Identifier: MIT */
/* The one logging facility: the core and every plugin log through it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "zap-private.h"

static pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;
static zap_log_fn handler;
static void *handler_user;
/* -1: not decided yet (take ZAP_LOG_LEVEL); else an enum zap_log_level. */
static atomic_int level_override = -1;

static const char *const level_names[] = { "ERROR", "WARN", "INFO", "DEBUG" };

static enum zap_log_level current_level(void)
{
	int l = atomic_load(&level_override);

	return l >= 0 ? (enum zap_log_level)l : zap__config()->log_level;
}

int zap__log_enabled(enum zap_log_level level)
{
	return level <= current_level();
}

static void emit(enum zap_log_level level, const char *domain, const char *msg)
{
	zap_log_fn fn;
	void *user;

	pthread_mutex_lock(&handler_lock);
	fn = handler;
	user = handler_user;
	pthread_mutex_unlock(&handler_lock);
	if (fn) {
		fn(level, domain, msg, user);
		return;
	}
	/* One fprintf per line so that concurrent lines do not interleave. */
	fprintf(stderr, "zap: %s: %s: %s\n", level_names[level], domain, msg);
}

void zap__vlog(enum zap_log_level level, const char *domain, const char *fmt, va_list ap)
{
	char msg[1024];

	if ((unsigned)level > ZAP_LOG_DEBUG || !zap__log_enabled(level))
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	emit(level, domain, msg);
}

void zap__log(enum zap_log_level level, const char *domain, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	zap__vlog(level, domain, fmt, ap);
	va_end(ap);
}

void zap__log_pick_summary(const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	if (zap__config()->quiet || current_level() == ZAP_LOG_ERROR)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	emit(ZAP_LOG_INFO, "pick", msg);
}

ZAP_EXPORT void zap_set_log_handler(zap_log_fn fn, void *user)
{
	pthread_mutex_lock(&handler_lock);
	handler = fn;
	handler_user = user;
	pthread_mutex_unlock(&handler_lock);
}

ZAP_EXPORT int zap_set_log_level(enum zap_log_level level)
{
	if ((unsigned)level > ZAP_LOG_DEBUG)
		return zap__fail(-EINVAL, "log level %d out of range", (int)level);
	atomic_store(&level_override, (int)level);
	return 0;
}
