/* SPDX-License-Identifier: MIT */
/*
 * Non-blocking byte I/O on a socket, plain or through util/tls, and the
 * dialling side's TLS handshake (zap-conn.h).
 *
 * Shared state: none; a struct ztls_conn is used by one thread at a time.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "zap-conn.h"
#include "zap-tls.h"

ssize_t zconn_recv(int fd, struct ztls_conn *tc, void *buf, size_t len, short *ev,
		   char *why, size_t whylen)
{
	ssize_t k;
	int e;

	if (tc)
		return ztls_read(tc, buf, len, ev, why, whylen);
	k = recv(fd, buf, len, MSG_DONTWAIT);
	if (k >= 0)
		return k;
	*ev = POLLIN;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return -EAGAIN;
	e = errno; /* snprintf() and strerror() may change it */
	snprintf(why, whylen, "recv: %s", strerror(e));
	return -e;
}

ssize_t zconn_send(int fd, struct ztls_conn *tc, const void *buf, size_t len, short *ev,
		   char *why, size_t whylen)
{
	ssize_t k;
	int e;

	if (tc)
		return ztls_write(tc, buf, len, ev, why, whylen);
	k = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (k >= 0)
		return k;
	*ev = POLLOUT;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return -EAGAIN;
	e = errno; /* snprintf() and strerror() may change it */
	snprintf(why, whylen, "send: %s", strerror(e));
	return -e;
}

int zconn_all(int fd, struct ztls_conn *tc, void *buf, size_t len, bool wr,
	      zconn_wait_fn wait, void *user, char *why, size_t whylen)
{
	size_t done = 0;

	while (done < len) {
		short ev = wr ? POLLOUT : POLLIN;
		ssize_t n = wr ? zconn_send(fd, tc, (char *)buf + done, len - done, &ev,
					    why, whylen)
			       : zconn_recv(fd, tc, (char *)buf + done, len - done, &ev,
					    why, whylen);
		int rc;

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (!n) {
			snprintf(why, whylen, "peer closed the connection");
			return -ECONNRESET;
		}
		if (n != -EAGAIN)
			return (int)n;
		rc = wait(user, fd, ev);
		if (rc)
			return rc;
	}
	return 0;
}

int zconn_tls_dial(struct ztls_ctx *x, int fd, const char *want, zconn_wait_fn wait,
		   void *user, struct ztls_conn **out, char *why, size_t whylen)
{
	short ev = POLLOUT;
	int rc = ztls_conn_new(x, fd, false, want, out, why, whylen);

	while (!rc) {
		rc = ztls_handshake(*out, &ev, why, whylen);
		if (rc == 1)
			return 0;
		if (!rc)
			rc = wait(user, fd, ev);
	}
	ztls_conn_free(*out);
	*out = NULL;
	return rc;
}
