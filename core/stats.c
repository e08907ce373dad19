/* SPDX-License-Identifier: MIT */
/*
 * What an operator sees: zap_stats() and zap_peer_list() over the
 * transports' optional stats and peers ops (plugin ABI 1.5). The core
 * hands a plugin structures of its own full size and copies into the
 * caller's only what the caller's size covers, so an application, the
 * core and a plugin may each know a different version of the structs.
 * No shared state here: every call works on its own copies.
 */
#include <stdlib.h>
#include <string.h>

#include "zap-private.h"

/* Index: enum zap_close_reason. Metric labels: keep them [a-z_]. */
static const char *const close_names[ZAP_CLOSE_REASON_COUNT] = {
	[ZAP_CLOSE_OTHER] = "other",
	[ZAP_CLOSE_PEER_EOF] = "peer_eof",
	[ZAP_CLOSE_PEER_RESET] = "peer_reset",
	[ZAP_CLOSE_IDLE] = "idle",
	[ZAP_CLOSE_STALL] = "stall",
	[ZAP_CLOSE_EVICTED] = "evicted",
	[ZAP_CLOSE_PROTOCOL] = "protocol",
	[ZAP_CLOSE_OVERSIZE] = "oversize",
	[ZAP_CLOSE_TLS] = "tls",
	[ZAP_CLOSE_IDENTITY] = "identity",
	[ZAP_CLOSE_HANDSHAKE] = "handshake",
	[ZAP_CLOSE_SEND_ABORTED] = "send_aborted",
	[ZAP_CLOSE_SHUTDOWN] = "shutdown",
};
_Static_assert(ZAP_CLOSE_REASON_COUNT <= ZAP_CLOSE_REASON_SLOTS,
	       "struct zap_stats.conns_closed has a slot for every reason");

ZAP_EXPORT const char *zap_close_reason_name(int reason)
{
	if (reason < 0 || reason >= ZAP_CLOSE_REASON_COUNT)
		return "other";
	return close_names[reason];
}

ZAP_EXPORT int zap_stats(const struct zap_transport *t, struct zap_stats *out)
{
	struct zap_stats full;
	int rc;

	zap__clear_error();
	if (!t || !out || out->size < sizeof(out->size))
		return zap__fail(-EINVAL, "zap_stats: NULL argument or bad size");
	memset(&full, 0, sizeof(full));
	full.size = sizeof(full);
	rc = zap__transport_stats(t, &full);
	if (rc)
		return rc;
	return zap__copy_sized(out, &full, sizeof(full));
}

ZAP_EXPORT const char *zap_event_type_name(int type)
{
	switch (type) {
	case ZAP_EVENT_CONNECTED:
		return "connected";
	case ZAP_EVENT_UPGRADED:
		return "upgraded";
	case ZAP_EVENT_DISCONNECTED:
		return "disconnected";
	case ZAP_EVENT_REFUSED:
		return "refused";
	default:
		return "unknown";
	}
}

/* @n zeroed rows of @row bytes (the core's structs), each with its size
 * member (the first) set, for a plugin to fill; NULL without memory. */
static void *new_rows(size_t n, size_t row)
{
	char *p = calloc(n, row);

	for (size_t i = 0; p && i < n; i++)
		memcpy(p + i * row, &row, sizeof(row));
	return p;
}

/*
 * Copy @n rows of @row bytes (the core's structs, each starting with its
 * size) into the caller's array, whose rows are @stride bytes apart and
 * as long: each row gets its size set to @stride and the members it
 * covers.
 */
static void copy_rows(void *out, size_t stride, const void *rows, size_t row, size_t n)
{
	size_t k = stride < row ? stride : row;

	for (size_t i = 0; i < n; i++) {
		char *d = (char *)out + i * stride;
		memcpy(d, &stride, sizeof(stride));
		memcpy(d + sizeof(size_t), (const char *)rows + i * row + sizeof(size_t),
		       k - sizeof(size_t));
	}
}

/* More entries than any endpoint holds connections (RLIMIT_NOFILE). */
#define PEER_LIST_MAX (1u << 20)

ZAP_EXPORT int zap_peer_list(const struct zap_transport *t, struct zap_peer_info *out,
			     size_t n)
{
	struct zap_peer_info *tmp = NULL;
	size_t stride = 0;
	int rc;

	zap__clear_error();
	if (!t || (n && (!out || out->size < sizeof(out->size))))
		return zap__fail(-EINVAL, "zap_peer_list: NULL argument or bad size");
	if (n > PEER_LIST_MAX)
		n = PEER_LIST_MAX;
	if (n) {
		stride = out->size;
		tmp = new_rows(n, sizeof(*tmp));
		if (!tmp)
			return -ENOMEM;
	}
	rc = zap__transport_peers(t, tmp, n);
	if (rc > 0)
		copy_rows(out, stride, tmp, sizeof(*tmp),
			  (size_t)rc < n ? (size_t)rc : n);
	free(tmp);
	return rc;
}

/* More than a transport queues (util/tcp keeps 128). */
#define EVENTS_MAX 4096u

ZAP_EXPORT int zap_events(const struct zap_transport *t, struct zap_event *out, size_t n)
{
	struct zap_event *tmp;
	size_t stride;
	int rc;

	zap__clear_error();
	if (!t || !out || !n || out->size < sizeof(out->size))
		return zap__fail(-EINVAL,
				 "zap_events: NULL argument, no room or bad size");
	if (n > EVENTS_MAX)
		n = EVENTS_MAX;
	stride = out->size;
	tmp = new_rows(n, sizeof(*tmp));
	if (!tmp)
		return -ENOMEM;
	rc = zap__transport_events(t, tmp, n);
	if (rc > 0)
		copy_rows(out, stride, tmp, sizeof(*tmp),
			  (size_t)rc < n ? (size_t)rc : n);
	free(tmp);
	return rc;
}
