/* SPDX-License-Identifier: MIT */
/*
 * The bootstrap's byte stream, plain or TLS, and peer names with keys
 * (gd_tls.h).
 *
 * Shared state: none.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "gd_tls.h"

ssize_t gd_io_recv(int fd, struct ztls_conn *tc, void *buf, size_t len, short *ev,
		   char *why, size_t wl)
{
	ssize_t k;

	if (tc)
		return ztls_read(tc, buf, len, ev, why, wl);
	k = recv(fd, buf, len, MSG_DONTWAIT);
	if (k >= 0)
		return k;
	*ev = POLLIN;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return -EAGAIN;
	snprintf(why, wl, "recv: %s", strerror(errno));
	return -errno;
}

ssize_t gd_io_send(int fd, struct ztls_conn *tc, const void *buf, size_t len, short *ev,
		   char *why, size_t wl)
{
	ssize_t k;

	if (tc)
		return ztls_write(tc, buf, len, ev, why, wl);
	k = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (k >= 0)
		return k;
	*ev = POLLOUT;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return -EAGAIN;
	snprintf(why, wl, "send: %s", strerror(errno));
	return -errno;
}

int gd_io_all(int fd, struct ztls_conn *tc, void *buf, size_t len, bool wr,
	      gd_wait_fn wait, void *user, char *why, size_t wl)
{
	size_t done = 0;

	while (done < len) {
		short ev = wr ? POLLOUT : POLLIN;
		ssize_t n = wr ? gd_io_send(fd, tc, (char *)buf + done, len - done, &ev,
					    why, wl)
			       : gd_io_recv(fd, tc, (char *)buf + done, len - done, &ev,
					    why, wl);
		int rc;

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (!n) {
			snprintf(why, wl, "peer closed the bootstrap connection");
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

int gd_tls_dial(struct ztls_ctx *x, int fd, const char *want, gd_wait_fn wait, void *user,
		struct ztls_conn **out, char *why, size_t wl)
{
	short ev = POLLOUT;
	int rc = ztls_conn_new(x, fd, false, want, out, why, wl);

	while (!rc) {
		rc = ztls_handshake(*out, &ev, why, wl);
		if (rc == 1)
			return 0;
		if (!rc)
			rc = wait(user, fd, ev);
	}
	ztls_conn_free(*out);
	*out = NULL;
	return rc;
}

int gd_peer_norm(const char *peer, bool tls, char *out, size_t ol, char *why, size_t wl)
{
	const char *key = strchr(peer, '#');
	unsigned char fp[32];
	char text[ZTLS_FP_LEN];
	size_t al = key ? (size_t)(key - peer) : strlen(peer);

	if (al >= ol) {
		snprintf(why, wl, "peer address too long");
		return -EINVAL;
	}
	if (!key) {
		memcpy(out, peer, al + 1);
		return 0;
	}
	if (!tls) {
		snprintf(why, wl,
			 "peer \"%s\" requires a key, but TLS is off (ZAP_TLS_CERT)",
			 peer);
		return -EINVAL;
	}
	if (ztls_fp_parse(key + 1, strlen(key + 1), fp)) {
		snprintf(why, wl, "peer \"%s\": want host:port#sha256:<64 hex digits>",
			 peer);
		return -EINVAL;
	}
	ztls_fp_format(fp, text);
	memcpy(out, peer, al);
	out[al] = '\0';
	if (gd_peer_join(out, text, out, ol)) {
		snprintf(why, wl, "peer address too long");
		return -EINVAL;
	}
	return 0;
}

int gd_peer_join(const char *addr, const char *fp, char *out, size_t ol)
{
	size_t al = strlen(addr), fl = strlen(fp);

	if (al + (fl ? fl + 1 : 0) >= ol)
		return -ENAMETOOLONG;
	memmove(out, addr, al);
	if (fl) {
		out[al] = '#';
		memcpy(out + al + 1, fp, fl);
		al += fl + 1;
	}
	out[al] = '\0';
	return 0;
}

bool gd_peer_match(const char *have, const char *want)
{
	size_t wl = strlen(want);

	if (!strcmp(have, want))
		return true;
	return !strchr(want, '#') && !strncmp(have, want, wl) && have[wl] == '#';
}
