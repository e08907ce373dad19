/* SPDX-License-Identifier: MIT */
/*
 * Unix-domain stream sockets on the TCP wire: the same frames, handshake
 * and connection table as TCP (WIRE.md, "Unix-domain sockets"); only the
 * listen socket, the dial, and what proves a peer differ.
 *
 * Identity. A Unix connection has no useful source address (the dialer's
 * socket is unnamed), but the kernel tells who is at the other end:
 * SO_PEERCRED, the uid, gid and pid of the process that connected (or, on
 * a socket we dialed, that listened). That is the identity; what a HELLO
 * claims is believed only as far as these credentials back it:
 *
 *   unix:/path   a socket file owned by the peer's uid, on which a process
 *                of the peer's uid listens (we connect once to check, and
 *                read that listener's SO_PEERCRED);
 *   unix:@name   an abstract name has no owner or mode, so only the second
 *                half: a process of the peer's uid listens on it;
 *   host:port    a loopback or wildcard address (wildcard: loopback with
 *                that port): it proves no more than TCP from 127.0.0.1
 *                does, where the port is a claim plaintext cannot check.
 *
 * Everything else is refused with the peer's credentials in the reason.
 * One user's processes can pose as one another: they can ptrace each
 * other anyway; TLS over the Unix socket tells them apart by key.
 *
 * Shared state: none of its own. tw_unix_listen() and tw_unix_unlink()
 * run at open and destroy; tw_unix_accepted() and tw_unix_hello_peer() on
 * the connection's handshake owner (accept thread or dialer), like the
 * rest of the handshake (tcp_handshake.c).
 */
#include "tcp_int.h"
#include "zap-addr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* ZAP_UNIX_SOCKET_MODE: octal permission bits of a listen socket file,
 * read through libzap's registry (its default: TCP_UNIX_MODE). */
static int unix_mode(const struct tcp_wire *w, mode_t *out)
{
	uint64_t m = TCP_UNIX_MODE;
	int rc = w->host->config_u64(TCP_UNIX_MODE_ENV, &m);

	/* A bad value: the registry recorded the reason, naming it. */
	*out = (mode_t)m;
	return rc < 0 ? rc : 0;
}

/*
 * Make room for a socket file at @path: nothing there, or a stale socket
 * of ours that nobody listens on (removed). Anything else is refused:
 * never unlink a file that is not a socket, another user's socket, or a
 * socket someone listens on (a connect probe tells).
 */
static int clear_stale(const struct tcp_wire *w, const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT
			       ? 0
			       : w->host->fail(-errno, "%s: cannot listen on unix:%s: %s",
					       w->dom, path, strerror(errno));
	if (!S_ISSOCK(st.st_mode))
		return w->host
			->fail(-EADDRINUSE,
			       "%s: cannot listen on unix:%s: it exists and is not a "
			       "socket; not replacing it",
			       w->dom, path);
	if (st.st_uid != geteuid())
		return w->host->fail(
			-EADDRINUSE,
			"%s: cannot listen on unix:%s: the socket there belongs to "
			"uid %u; not replacing it",
			w->dom, path, (unsigned)st.st_uid);
	struct zaddr a = { .kind = ZADDR_UNIX };
	struct sockaddr_un sun;
	socklen_t sl;
	snprintf(a.host, sizeof(a.host), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || zaddr_unix_sockaddr(&a, &sun, &sl)) {
		int e = fd < 0 ? errno : EINVAL;
		if (fd >= 0)
			close(fd);
		return w->host->fail(-e, "%s: socket: %s", w->dom, strerror(e));
	}
	int r = connect(fd, (struct sockaddr *)&sun, sl);
	int e = errno;
	close(fd);
	if (!r || e == EAGAIN) /* accepted, or a full backlog: it is live */
		return w->host
			->fail(-EADDRINUSE,
			       "%s: cannot listen on unix:%s: another process listens "
			       "there",
			       w->dom, path);
	if (e != ECONNREFUSED)
		return w->host->fail(-e, "%s: cannot listen on unix:%s: probing it: %s",
				     w->dom, path, strerror(e));
	if (unlink(path) < 0 && errno != ENOENT)
		return w->host->fail(
			-errno,
			"%s: cannot listen on unix:%s: removing the stale socket: %s",
			w->dom, path, strerror(errno));
	w->host->log(ZAP_LOG_INFO, w->dom, "removed the stale socket unix:%s", path);
	return 0;
}

/*
 * Bind @fd to the file @path with @mode, with no moment where a chmod()
 * could follow a link someone planted at @path (nor one where the file
 * has another mode): bind in a private directory (0700, made beside @path
 * so that the move stays on one file system), set the mode there, and
 * move the socket into place only if nothing took @path meanwhile
 * (RENAME_NOREPLACE, else link(), which never replaces either). *@st: the
 * socket file.
 */
static int bind_path(struct tcp_wire *w, int fd, const char *path, mode_t mode,
		     struct stat *st)
{
	const char *slash = strrchr(path, '/');
	char priv[ZADDR_UNIX_MAX + 16], sock[ZADDR_UNIX_MAX + 24];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int dfd = -1, r = 0;

	snprintf(priv, sizeof(priv), "%.*s/.zap-XXXXXX", (int)(slash - path), path);
	if (!mkdtemp(priv))
		return w->host->fail(-errno, "%s: cannot listen on unix:%s: %s", w->dom,
				     path, strerror(errno));
	snprintf(sock, sizeof(sock), "%s/s", priv);
	if (strlen(sock) < sizeof(sun.sun_path)) {
		memcpy(sun.sun_path, sock, strlen(sock) + 1);
	} else { /* a long path: the same directory, by a short name */
		dfd = open(priv, O_PATH | O_DIRECTORY | O_CLOEXEC);
		snprintf(sun.sun_path, sizeof(sun.sun_path), "/proc/self/fd/%d/s", dfd);
	}
	if ((dfd == -1 && strlen(sock) >= sizeof(sun.sun_path)) ||
	    bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || chmod(sock, mode) < 0 ||
	    lstat(sock, st) < 0) {
		r = -errno;
	} else if (renameat2(AT_FDCWD, sock, AT_FDCWD, path, RENAME_NOREPLACE) < 0) {
		/* File systems without RENAME_NOREPLACE: link() fails with
		 * EEXIST just the same. */
		r = errno == EINVAL || errno == ENOSYS
			    ? (link(sock, path) < 0 ? -errno : 0)
			    : -errno;
		if (r == -EEXIST)
			r = -EADDRINUSE;
	}
	unlink(sock); /* the private name (after link(), or on failure) */
	rmdir(priv);
	if (dfd >= 0)
		close(dfd);
	if (r)
		return w->host->fail(r, "%s: cannot listen on unix:%s: %s%s", w->dom,
				     path, strerror(-r),
				     r == -EADDRINUSE
					     ? " (something took the path meanwhile)"
					     : "");
	return 0;
}

int tw_unix_listen(struct tcp_wire *w, const struct zaddr *a)
{
	struct sockaddr_un sun;
	socklen_t sl;
	mode_t mode;
	bool path = a->host[0] == '/';
	int r = unix_mode(w, &mode);

	if (r)
		return r;
	if (zaddr_unix_sockaddr(a, &sun, &sl))
		return w->host->fail(-EINVAL, "%s: malformed Unix address", w->dom);
	if (path && (r = clear_stale(w, a->host)))
		return r;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return w->host->fail(-errno, "%s: socket: %s", w->dom, strerror(errno));
	/* A path gets its mode before listen() and before it has its name. */
	struct stat st;
	if (path && (r = bind_path(w, fd, a->host, mode, &st))) {
		close(fd);
		return r;
	}
	if (!path && bind(fd, (struct sockaddr *)&sun, sl) < 0) {
		r = -errno;
		close(fd);
		return w->host->fail(r, "%s: cannot listen on unix:%s: %s%s", w->dom,
				     a->host, strerror(-r),
				     r == -EADDRINUSE ? " (the abstract name is taken)"
						      : "");
	}
	if (listen(fd, SOMAXCONN) < 0) {
		r = -errno;
		if (path)
			unlink(a->host);
		close(fd);
		return w->host->fail(r, "%s: cannot listen on unix:%s: %s", w->dom,
				     a->host, strerror(-r));
	}
	/* Fits: a unix address is at most 5 + 108 bytes (zap-addr.h). */
	_Static_assert(ZADDR_UNIX_MAX + 7 <= sizeof(w->bound), "a unix address fits");
	if (path) {
		memcpy(w->unix_path, a->host, strlen(a->host) + 1);
		w->unix_dev = st.st_dev;
		w->unix_ino = st.st_ino;
	}
	zaddr_join(a, "", w->bound, sizeof(w->bound));
	memcpy(w->addr, w->bound, strlen(w->bound) + 1);
	w->lfd = fd;
	return 0;
}

void tw_unix_unlink(struct tcp_wire *w)
{
	struct stat st;

	/* Only our own socket file: someone may have replaced it. */
	if (w->unix_path[0] && !lstat(w->unix_path, &st) && st.st_dev == w->unix_dev &&
	    st.st_ino == w->unix_ino)
		unlink(w->unix_path);
	w->unix_path[0] = '\0';
}

/* SO_PEERCRED of @fd as "uid=U gid=G pid=P"; false if unavailable. */
bool tw_peer_cred(int fd, struct ucred *cr, char *buf, size_t len)
{
	socklen_t cl = sizeof(*cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &cl) < 0 || cl != sizeof(*cr)) {
		if (len)
			buf[0] = '\0';
		return false;
	}
	snprintf(buf, len, "uid=%u gid=%u pid=%d", (unsigned)cr->uid, (unsigned)cr->gid,
		 (int)cr->pid);
	return true;
}

void tw_unix_accepted(struct tcp_conn *c)
{
	struct ucred cr;

	c->local = true;
	if (tw_peer_cred(c->fd, &cr, c->ident, sizeof(c->ident)))
		snprintf(c->src, sizeof(c->src), "unix peer %s", c->ident);
	else
		snprintf(c->src, sizeof(c->src), "unix peer (no credentials)");
}

int tw_unix_connect(struct tcp_wire *w, const char *peer, const struct zaddr *a,
		    struct zap_ctx *ctx, int *out, struct sockaddr_storage *sa,
		    socklen_t *salen)
{
	struct sockaddr_un sun;
	socklen_t sl;
	uint64_t deadline = now_ms() + w->hs_timeout_ms;

	if (zaddr_unix_sockaddr(a, &sun, &sl))
		return w->host->fail(-EINVAL, "%s: malformed peer address \"%s\"", w->dom,
				     peer);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return w->host->fail(-errno, "%s: socket: %s", w->dom, strerror(errno));
	/* A Unix connect completes at once or, with the listener's backlog
	 * full, says EAGAIN and must be retried: no POLLOUT tells when. */
	while (connect(fd, (struct sockaddr *)&sun, sl) < 0) {
		int e = errno;
		if (e == EINTR)
			continue;
		if (e != EAGAIN || now_ms() >= deadline) {
			close(fd);
			return w->host->fail(-e, "%s: connect to %s: %s%s", w->dom, peer,
					     strerror(e),
					     e == ECONNREFUSED || e == ENOENT
						     ? " (nothing listens there)"
					     : e == EAGAIN ? " (its backlog stayed full)"
							   : "");
		}
		struct pollfd p[2] = {
			{ .fd = w->stop_fd, .events = POLLIN },
			{ .fd = w->host->ctx_fd(ctx), .events = POLLIN },
		};
		poll(p, 2, ms_min(w->host->ctx_timeout_ms(ctx), 2));
		int err = atomic_load(&w->shut) ? -ESHUTDOWN : w->host->ctx_err(ctx);
		if (!err && !w->host->ctx_timeout_ms(ctx))
			err = -ETIMEDOUT;
		if (err) {
			close(fd);
			return err;
		}
	}
	memcpy(sa, &sun, sl);
	*salen = sl;
	*out = fd;
	return 0;
}

/*
 * Whether the Unix address @h claims is backed by @c's credentials (see
 * the top of this file). 0, or -EPROTO with @why.
 */
static int prove(struct tcp_wire *w, const struct tcp_conn *c, const struct tcp_hello *h,
		 char *why, size_t whylen)
{
	struct ucred me, lis;
	struct zaddr a;
	struct sockaddr_un sun;
	socklen_t sl, ml = sizeof(me);
	struct stat st;
	char lid[64];

	if (!strcmp(h->addr, w->bound))
		return 0; /* ours: only a proven self-connection passes (hello_read) */
	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &me, &ml) < 0 ||
	    zaddr_parse(h->addr, &a) || zaddr_unix_sockaddr(&a, &sun, &sl)) {
		snprintf(why, whylen, "HELLO from %s: cannot check %s", c->src, h->addr);
		return -EPROTO;
	}
	if (a.host[0] == '/' &&
	    (lstat(a.host, &st) < 0 || !S_ISSOCK(st.st_mode) || st.st_uid != me.uid)) {
		snprintf(why, whylen,
			 "HELLO from %s claims %s, which is not a socket owned by uid %u",
			 c->src, h->addr, (unsigned)me.uid);
		return -EPROTO;
	}
	/* Who listens there: connect once and ask. The listener sees a
	 * connection closed before its HELLO. */
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sl) < 0) {
		int e = fd < 0 ? EMFILE : errno;
		if (fd >= 0)
			close(fd);
		snprintf(why, whylen,
			 "HELLO from %s claims %s, where nothing answers (%s)", c->src,
			 h->addr, strerror(e));
		return -EPROTO;
	}
	bool ok = tw_peer_cred(fd, &lis, lid, sizeof(lid));
	close(fd);
	if (!ok || lis.uid != me.uid) {
		snprintf(why, whylen, "HELLO from %s claims %s, whose listener is %s",
			 c->src, h->addr, ok ? lid : "unknown");
		return -EPROTO;
	}
	return 0;
}

int tw_unix_hello_peer(struct tcp_wire *w, struct tcp_conn *c, const struct tcp_hello *h,
		       char *why, size_t whylen)
{
	struct ucred cr;

	if (c->dialed) {
		/* We dialed that socket: its listener answers for it. */
		tw_peer_cred(c->fd, &cr, c->ident, sizeof(c->ident));
		if (strcmp(h->addr, c->src)) {
			snprintf(why, whylen, "HELLO from %s (%s) claims %.100s", c->src,
				 c->ident[0] ? c->ident : "no credentials", h->addr);
			return -EPROTO;
		}
		snprintf(c->raddr, sizeof(c->raddr), "%s", c->src);
		return 0;
	}
	if (!c->ident[0]) {
		snprintf(why, whylen, "no peer credentials (SO_PEERCRED)");
		return -EPROTO;
	}
	int r = tcp_hello_peer_local(h, c->src, c->raddr, sizeof(c->raddr), why, whylen);
	if (r == 1) {
		r = prove(w, c, h, why, whylen);
		if (r)
			c->raddr[0] = '\0';
	}
	return r;
}
