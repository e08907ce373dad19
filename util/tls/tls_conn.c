/* SPDX-License-Identifier: MIT */
/*
 * One TLS connection over a non-blocking stream socket: the socket BIO,
 * the handshake (with the plaintext-peer check and the reasons a refused
 * peer is told about), reads and writes. A struct ztls_conn belongs to one
 * thread at a time; the SSL_CTX it uses is shared read-only (tls_int.h).
 */
#include "tls_int.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>

/* ------------------------------------------------------------------------ */
/* The socket BIO without SIGPIPE                                            */
/* ------------------------------------------------------------------------ */

static int bio_write(BIO *b, const char *buf, int len)
{
	int fd = (int)(intptr_t)BIO_get_data(b);
	ssize_t k;

	BIO_clear_retry_flags(b);
	do
		k = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
	while (k < 0 && errno == EINTR);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		BIO_set_retry_write(b);
	return (int)k;
}

static int bio_read(BIO *b, char *buf, int len)
{
	int fd = (int)(intptr_t)BIO_get_data(b);
	ssize_t k;

	BIO_clear_retry_flags(b);
	do
		k = recv(fd, buf, (size_t)len, 0);
	while (k < 0 && errno == EINTR);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		BIO_set_retry_read(b);
	return (int)k;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1;
	case BIO_C_GET_FD:
		if (ptr)
			*(int *)ptr = (int)(intptr_t)BIO_get_data(b);
		return (long)(intptr_t)BIO_get_data(b);
	default:
		return 0;
	}
}

static BIO_METHOD *bio_meth;

static void bio_meth_init(void)
{
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK |
					     BIO_TYPE_DESCRIPTOR,
				     "zap socket");
	if (m && BIO_meth_set_write(m, bio_write) && BIO_meth_set_read(m, bio_read) &&
	    BIO_meth_set_ctrl(m, bio_ctrl))
		bio_meth = m;
	else
		BIO_meth_free(m);
}

BIO *ztls_bio_new(int fd)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	BIO *b;

	pthread_once(&once, bio_meth_init);
	if (!bio_meth || !(b = BIO_new(bio_meth)))
		return NULL;
	BIO_set_data(b, (void *)(intptr_t)fd);
	BIO_set_init(b, 1);
	return b;
}

/* ------------------------------------------------------------------------ */
/* Connections                                                               */
/* ------------------------------------------------------------------------ */

int ztls_conn_new(struct ztls_ctx *x, int fd, bool server, const char *want_fp,
		  struct ztls_conn **out, char *why, size_t whylen)
{
	struct ztls_conn *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	c->x = x;
	c->fd = fd;
	c->server = server;
	if (want_fp) {
		if (ztls_fp_parse(want_fp, strlen(want_fp), c->want)) {
			snprintf(why, whylen,
				 "required peer key \"%s\" is not sha256:<64 hex digits>",
				 want_fp);
			free(c);
			return -EINVAL;
		}
		c->has_want = true;
	}
	ERR_clear_error();
	c->ssl = SSL_new(x->ssl);
	if (!c->ssl)
		goto nomem;
	SSL_set_app_data(c->ssl, c);
	if (x->ktls_kernel) {
		/* kTLS needs OpenSSL's own socket BIO; ztls_write() keeps its
		 * write()s from raising SIGPIPE. */
		if (SSL_set_fd(c->ssl, fd) != 1)
			goto nomem;
	} else {
		BIO *b = ztls_bio_new(fd);
		if (!b)
			goto nomem;
		SSL_set_bio(c->ssl, b, b);
	}
	if (server)
		SSL_set_accept_state(c->ssl);
	else
		SSL_set_connect_state(c->ssl);
	*out = c;
	return 0;
nomem:
	ztls_ssl_err(why, whylen, "cannot set up a TLS connection");
	SSL_free(c->ssl);
	free(c);
	return -ENOMEM;
}

void ztls_conn_free(struct ztls_conn *c)
{
	if (!c)
		return;
	if (c->done && !c->broken) {
		/* One non-blocking try; the socket is closed right after. */
		ERR_clear_error();
		if (c->x->ktls_kernel) {
			sigset_t pipe, old;
			sigemptyset(&pipe);
			sigaddset(&pipe, SIGPIPE);
			pthread_sigmask(SIG_BLOCK, &pipe, &old);
			SSL_shutdown(c->ssl);
			struct timespec zero = { 0, 0 };
			while (sigtimedwait(&pipe, NULL, &zero) > 0)
				;
			pthread_sigmask(SIG_SETMASK, &old, NULL);
		} else {
			SSL_shutdown(c->ssl);
		}
		ERR_clear_error();
	}
	SSL_free(c->ssl);
	free(c);
}

/*
 * SSL_get_error() needs an empty error queue before each call; every
 * failure path here drains it, so on the data path it is almost always
 * empty, and peeking costs less than ERR_clear_error() (which showed in
 * profiles of 64 B round trips).
 */
static inline void clear_errors(void)
{
	if (ERR_peek_error())
		ERR_clear_error();
}

/* Alerts a peer sends when it refuses our certificate (RFC 8446 6.2). */
static bool alert_refuses_us(int reason)
{
	switch (reason - SSL_AD_REASON_OFFSET) {
	case SSL_AD_BAD_CERTIFICATE:
	case SSL_AD_UNSUPPORTED_CERTIFICATE:
	case SSL_AD_CERTIFICATE_REVOKED:
	case SSL_AD_CERTIFICATE_EXPIRED:
	case SSL_AD_CERTIFICATE_UNKNOWN:
	case SSL_AD_UNKNOWN_CA:
	case SSL_AD_ACCESS_DENIED:
	case SSL_AD_DECRYPT_ERROR:
	case SSL_AD_HANDSHAKE_FAILURE:
	case SSL_AD_CERTIFICATE_REQUIRED:
		return true;
	default:
		return false;
	}
}

/* Map a failed SSL call (SSL_get_error() @err) to an errno and a reason. */
static int fail(struct ztls_conn *c, int err, int sys_errno, const char *what, char *why,
		size_t whylen)
{
	c->broken = true;
	if (err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN) {
		ERR_clear_error();
		if (err == SSL_ERROR_ZERO_RETURN || !sys_errno ||
		    (sys_errno == ECONNRESET && !c->done)) {
			snprintf(
				why, whylen, "peer closed the connection during the %s%s",
				what,
				c->server || c->done
					? ""
					: " (a plaintext peer, or it refused us before the handshake)");
			return -ECONNRESET;
		}
		snprintf(why, whylen, "%s: %s", what, strerror(sys_errno));
		return sys_errno == EPIPE ? -EPIPE : -sys_errno;
	}
	if (c->vwhy[0]) {
		ERR_clear_error();
		snprintf(why, whylen, "peer refused: %s", c->vwhy);
		return -EACCES;
	}
	unsigned long e = ERR_peek_last_error();
	int reason = ERR_GET_REASON(e);
	char sub[200];
	ztls_ssl_err(sub, sizeof(sub), what);
	if (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE ||
	    reason == SSL_R_NO_CERTIFICATES_RETURNED) {
		snprintf(why, whylen, "peer refused: it presented no certificate");
		return -EACCES;
	}
	if (reason == SSL_R_BAD_SIGNATURE) {
		snprintf(
			why, whylen,
			"peer refused: it did not prove the key of the certificate it presented (bad CertificateVerify signature)");
		return -EACCES;
	}
	/* What a plaintext zap endpoint answers a ClientHello with (the
	 * start of its own frame, util/tcp) is no TLS record. */
	if (!c->server && !c->done && reason == SSL_R_WRONG_VERSION_NUMBER) {
		snprintf(why, whylen,
			 "the peer answered without TLS: a plaintext endpoint "
			 "(ZAP_TLS_CERT unset there), and this one requires TLS (%s)",
			 sub);
		return -EPROTO;
	}
	if (reason > SSL_AD_REASON_OFFSET && alert_refuses_us(reason)) {
		snprintf(why, whylen, "the peer refused this endpoint (%s)", sub);
		return -EACCES;
	}
	snprintf(why, whylen, "%s", sub);
	return -EPROTO;
}

/*
 * Tell a plaintext zap peer that this endpoint speaks TLS, so that its
 * send fails saying so instead of "connection reset" (the dialer looks for
 * a TLS record where it expects our HELLO, tcp_handshake.c): take in what
 * it sent (closing with unread bytes would reset the connection, and the
 * reset can overtake our answer), then answer with a fatal TLS alert,
 * unexpected_message, the record OpenSSL itself would send. Best effort:
 * the connection is refused whatever happens here.
 */
static void answer_plaintext(int fd)
{
	static const unsigned char alert[] = { 0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x0a };
	unsigned char sink[512];
	ssize_t k;

	for (int i = 0; i < 8; i++) {
		k = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (k <= 0)
			break;
	}
	k = send(fd, alert, sizeof(alert), MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)k;
}

/* Server: refuse at once what is not a TLS handshake record, and name a
 * plaintext zap peer as such. 1: TLS; 0: wait; negative: refused. */
static int first_byte(struct ztls_conn *c, char *why, size_t whylen)
{
	unsigned char b[4];
	ssize_t k = recv(c->fd, b, sizeof(b), MSG_PEEK);

	if (k < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (k == 0) {
		snprintf(why, whylen,
			 "peer closed the connection before the TLS handshake");
		return -EPIPE;
	}
	if (b[0] == 0x16)
		return 1;
	if (b[0] == 'Z' && (k < 4 || !memcmp(b, "ZAPW", 4))) {
		snprintf(
			why, whylen,
			"plaintext zap HELLO from a peer without TLS (ZAP_TLS_CERT unset there); this endpoint requires TLS");
		answer_plaintext(c->fd);
	} else
		snprintf(why, whylen, "not a TLS handshake (first byte 0x%02x)", b[0]);
	return -EPROTO;
}

int ztls_handshake(struct ztls_conn *c, short *events, char *why, size_t whylen)
{
	*events = POLLIN;
	if (c->done)
		return 1;
	if (c->server && !c->tls_seen) {
		int r = first_byte(c, why, whylen);
		if (r <= 0) {
			if (r < 0)
				c->broken = true;
			return r;
		}
		c->tls_seen = true;
	}
	ERR_clear_error();
	errno = 0;
	int r = SSL_do_handshake(c->ssl);
	if (r == 1) {
		const unsigned char *p = NULL;
		unsigned int pl = 0;
		SSL_get0_alpn_selected(c->ssl, &p, &pl);
		if (pl != sizeof(ZTLS_ALPN) - 1 || memcmp(p, ZTLS_ALPN, pl)) {
			c->broken = true;
			snprintf(why, whylen, "peer did not agree on ALPN \"%s\"",
				 ZTLS_ALPN);
			return -EPROTO;
		}
		if (!c->peer_fp[0] || !SSL_get0_peer_certificate(c->ssl)) {
			/* Cannot happen with SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
			 * never accept a peer we did not check. */
			c->broken = true;
			snprintf(why, whylen, "peer refused: no checked certificate");
			return -EACCES;
		}
		snprintf(c->cipher, sizeof(c->cipher), "%s %s", SSL_get_version(c->ssl),
			 SSL_get_cipher_name(c->ssl));
		c->done = true;
		return 1;
	}
	int se = errno;
	int err = SSL_get_error(c->ssl, r);
	if (err == SSL_ERROR_WANT_READ)
		return 0;
	if (err == SSL_ERROR_WANT_WRITE) {
		*events = POLLOUT;
		return 0;
	}
	return fail(c, err, se, "TLS handshake", why, whylen);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int ztls_handshake_wait(struct ztls_conn *c, uint64_t deadline_ms, int stop_fd, char *why,
			size_t whylen)
{
	for (;;) {
		short ev;
		int r = ztls_handshake(c, &ev, why, whylen);
		if (r == 1)
			return 0;
		if (r < 0)
			return r;
		uint64_t now = mono_ms();
		if (now >= deadline_ms) {
			c->broken = true;
			snprintf(why, whylen,
				 "TLS handshake not complete within the handshake timeout");
			return -ETIMEDOUT;
		}
		struct pollfd p[2] = { { .fd = c->fd, .events = ev },
				       { .fd = stop_fd, .events = POLLIN } };
		int k = poll(p, 2, (int)(deadline_ms - now));
		if (k < 0 && errno != EINTR)
			return -errno;
		if (k > 0 && p[1].revents) {
			snprintf(why, whylen, "shutting down");
			return -ESHUTDOWN;
		}
	}
}

ssize_t ztls_read(struct ztls_conn *c, void *buf, size_t len, short *events, char *why,
		  size_t whylen)
{
	size_t n = 0;

	clear_errors();
	errno = 0;
	if (SSL_read_ex(c->ssl, buf, len, &n))
		return (ssize_t)n;
	int se = errno;
	int err = SSL_get_error(c->ssl, 0);
	switch (err) {
	case SSL_ERROR_WANT_READ:
		*events = POLLIN;
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		*events = POLLOUT;
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return 0; /* close_notify */
	case SSL_ERROR_SYSCALL:
		if (!se) {
			c->broken = true;
			return 0; /* FIN without close_notify: the wire's
				   * framing tells a cut frame apart */
		}
		break;
	default:
		break;
	}
	return fail(c, err, se, "TLS read", why, whylen);
}

ssize_t ztls_write(struct ztls_conn *c, const void *buf, size_t len, short *events,
		   char *why, size_t whylen)
{
	size_t n = 0;
	int ok, se, err;

	clear_errors();
	errno = 0;
	if (c->x->ktls_kernel) {
		/* OpenSSL's socket BIO write()s: keep SIGPIPE off the
		 * application, and consume one raised here. */
		sigset_t pipe, old;
		struct timespec zero = { 0, 0 };
		sigemptyset(&pipe);
		sigaddset(&pipe, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &pipe, &old);
		ok = SSL_write_ex(c->ssl, buf, len, &n);
		se = errno;
		while (sigtimedwait(&pipe, NULL, &zero) > 0)
			;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	} else {
		ok = SSL_write_ex(c->ssl, buf, len, &n);
		se = errno;
	}
	if (ok)
		return (ssize_t)n;
	err = SSL_get_error(c->ssl, 0);
	if (err == SSL_ERROR_WANT_WRITE) {
		*events = POLLOUT;
		return -EAGAIN;
	}
	if (err == SSL_ERROR_WANT_READ) {
		*events = POLLIN;
		return -EAGAIN;
	}
	return fail(c, err, se ? se : EPIPE, "TLS write", why, whylen);
}

bool ztls_pending(const struct ztls_conn *c)
{
	return SSL_has_pending(c->ssl);
}

const char *ztls_conn_peer_fp(const struct ztls_conn *c)
{
	return c->done ? c->peer_fp : "";
}

const char *ztls_conn_cipher(const struct ztls_conn *c)
{
	return c->cipher;
}

bool ztls_conn_ktls_send(const struct ztls_conn *c)
{
	return BIO_get_ktls_send(SSL_get_wbio(c->ssl)) > 0;
}

int ztls_conn_export(struct ztls_conn *c, const char *label, unsigned char *out,
		     size_t len)
{
	return SSL_export_keying_material(c->ssl, out, len, label, strlen(label), NULL, 0,
					  0) == 1
		       ? 0
		       : -EIO;
}

bool ztls_conn_ktls_recv(const struct ztls_conn *c)
{
	return BIO_get_ktls_recv(SSL_get_rbio(c->ssl)) > 0;
}
