/* SPDX-License-Identifier: MIT */
/*
 * TLS under the wire (util/tls): the endpoint's TLS context, each
 * connection's TLS session, and the I/O calls the rest of the wire makes
 * instead of read()/sendmsg(), which run through TLS when the endpoint has
 * a certificate (WIRE.md, "TLS").
 *
 * Shared state: an SSL session is not thread-safe, and the leader reads a
 * connection while a sender (or the accept thread's HELLO) writes it, so
 * every call into a connection's session holds c->tls_mu, and only for
 * that one non-blocking call. Lock order: w->mu before c->tls_mu; nothing
 * takes w->mu while holding c->tls_mu. c->tls_ok, c->fp and c->hs_events
 * belong to whoever runs the handshake (tcp_handshake.c's rules).
 */
#include "tcp_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* One TLS record's worth: what a small frame is coalesced into. */
#define TLS_COALESCE 16384

int tw_tls_open(struct tcp_wire *w, const struct tcp_wire_args *a)
{
	char why[512];

	const char *partial = ztls_partial_config(a->tls_cert, a->tls_key, a->tls_ca,
						  a->tls_peers);

	if (partial)
		return w->host->fail(-EINVAL, "%s: %s", w->dom, partial);
	if (!a->tls_cert)
		return 0;
	struct ztls_config cfg = { .cert = a->tls_cert,
				   .key = a->tls_key,
				   .ca = a->tls_ca,
				   .peers = a->tls_peers,
				   .ktls = true };
	int r = ztls_ctx_new(&cfg, &w->tls, why, sizeof(why));
	if (r)
		return w->host->fail(ztls_open_err(r), "%s: TLS: %s", w->dom, why);
	if (ztls_ctx_warning(w->tls))
		w->host->log(ZAP_LOG_WARN, w->dom, "TLS: %s", ztls_ctx_warning(w->tls));
	w->host->log(ZAP_LOG_DEBUG, w->dom, "TLS 1.3 on, key %s, trusting %s, %s",
		     ztls_ctx_fingerprint(w->tls), ztls_ctx_trust(w->tls),
		     ztls_ctx_ktls(w->tls) ? "kernel TLS offered"
					   : "userspace TLS (no kernel TLS)");
	return 0;
}

void tw_tls_close(struct tcp_wire *w)
{
	ztls_ctx_free(w->tls);
	w->tls = NULL;
}

int tw_tls_conn_new(struct tcp_wire *w, struct tcp_conn *c, bool server,
		    const char *want_fp, char *why, size_t whylen)
{
	int r = ztls_conn_new(w->tls, c->fd, server, want_fp, &c->tls, why, whylen);

	if (r)
		return r;
	pthread_mutex_init(&c->tls_mu, NULL);
	c->hs_events = POLLIN;
	return 0;
}

void tw_tls_conn_free(struct tcp_conn *c)
{
	if (!c->tls)
		return;
	ztls_conn_free(c->tls);
	c->tls = NULL;
	pthread_mutex_destroy(&c->tls_mu);
}

int tw_tls_step(struct tcp_conn *c, char *why, size_t whylen)
{
	int r = ztls_handshake(c->tls, &c->hs_events, why, whylen);

	if (r == 1) {
		c->tls_ok = true;
		snprintf(c->fp, sizeof(c->fp), "%s", ztls_conn_peer_fp(c->tls));
	}
	return r;
}

void tw_tls_log_up(struct tcp_wire *w, const struct tcp_conn *c)
{
	if (!c->tls)
		return;
	w->host->log(ZAP_LOG_DEBUG, w->dom,
		     "TLS with %s: %s, kernel TLS send %s, receive %s", c->raddr,
		     ztls_conn_cipher(c->tls), ztls_conn_ktls_send(c->tls) ? "on" : "off",
		     ztls_conn_ktls_recv(c->tls) ? "on" : "off");
}

/* Negative errno -> -1 with errno set (the reason is in c->tls_why). */
static ssize_t io_fail(ssize_t r)
{
	errno = (int)-r;
	return -1;
}

ssize_t tw_io_read(struct tcp_conn *c, void *buf, size_t len)
{
	if (!c->tls)
		return read(c->fd, buf, len);
	short ev;
	pthread_mutex_lock(&c->tls_mu);
	ssize_t r = ztls_read(c->tls, buf, len, &ev, c->tls_why, sizeof(c->tls_why));
	pthread_mutex_unlock(&c->tls_mu);
	return r >= 0 ? r : io_fail(r);
}

/*
 * sendmsg(MSG_NOSIGNAL | MSG_DONTWAIT) over @iov, or through TLS. TLS
 * writes one buffer at a time, so a frame is coalesced into one record
 * when it is small (a header alone would cost a record of its own). After
 * -1/EAGAIN on TLS, OpenSSL may hold an encrypted record of these bytes:
 * the caller must offer the same bytes again (it does: the iovec is
 * unchanged), and c->tls_wpend says so until a write succeeds, so that a
 * frame abandoned then counts as partly written (tcp_send.c).
 */
ssize_t tw_io_send(struct tcp_conn *c, const struct iovec *iov, size_t n)
{
	if (!c->tls) {
		struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = n };
		return sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	unsigned char tmp[TLS_COALESCE];
	const void *p = iov[0].iov_base;
	size_t len = iov[0].iov_len;
	if (n > 1 && len < TLS_COALESCE) {
		size_t k = 0;
		for (size_t i = 0; i < n && k < TLS_COALESCE; i++) {
			size_t take = iov[i].iov_len;
			if (take > TLS_COALESCE - k)
				take = TLS_COALESCE - k;
			memcpy(tmp + k, iov[i].iov_base, take);
			k += take;
		}
		p = tmp;
		len = k;
	}
	short ev;
	pthread_mutex_lock(&c->tls_mu);
	ssize_t r = ztls_write(c->tls, p, len, &ev, c->tls_why, sizeof(c->tls_why));
	pthread_mutex_unlock(&c->tls_mu);
	/* ev == POLLIN (TLS wants to read first) does not happen with TLS
	 * 1.3 and no renegotiation; if it did, the wait for room would
	 * return at once and retry, while the leader reads. */
	c->tls_wpend = r == -EAGAIN;
	return r >= 0 ? r : io_fail(r);
}

bool tw_io_pending(struct tcp_conn *c)
{
	if (!c->tls)
		return false;
	pthread_mutex_lock(&c->tls_mu);
	bool p = ztls_pending(c->tls);
	pthread_mutex_unlock(&c->tls_mu);
	return p;
}

const char *tw_io_err(const struct tcp_conn *c, int e)
{
	return c->tls && c->tls_why[0] ? c->tls_why : strerror(e);
}
