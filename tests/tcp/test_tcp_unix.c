/* SPDX-License-Identifier: MIT */
/*
 * The default transport over Unix-domain stream sockets: unix:/path and
 * unix:@name listen addresses and peers, mixed with TCP, and hostile
 * local peers (raw AF_UNIX sockets) that lie in their HELLO, stall or
 * flood. Socket files live in a fresh directory under $TMPDIR (or /tmp).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <zap/zap.h>

#include "zap-test.h"
#include "log-capture.h"

static char dir[96];
static unsigned seq;

/* Wait up to 3 s for a captured line containing all of @a and @b. */
static bool log_wait2(const char *a, const char *b)
{
	return zt_log_wait_line(a, b, 3000);
}

/* A fresh socket path in the test directory. */
static void path_new(char *buf, size_t len, const char *what)
{
	snprintf(buf, len, "unix:%s/%s-%u.sock", dir, what, seq++);
}

static struct zap_transport *ep_listen(const char *addr)
{
	struct zap_attr a = { .size = sizeof(a), .listen = addr };
	struct zap_transport *t = NULL;
	int r = zap_pick("=default", 0, &a, &t);
	if (r)
		fprintf(stderr, "zap_pick(%s): %s\n", addr, zap_strerror(r));
	assert_int_equal(r, 0);
	return t;
}

static struct zap_transport *ep_unix(char *addr, const char *what)
{
	char want[ZAP_PEER_MAX];
	path_new(want, sizeof(want), what);
	struct zap_transport *t = ep_listen(want);
	assert_int_equal(zap_transport_address(t, addr, ZAP_PEER_MAX), 0);
	assert_string_equal(addr, want);
	return t;
}

static struct zap_msg *recv_ok(struct zap_transport *t)
{
	struct zap_msg *m = NULL;
	int r = zap_recv(t, NULL, &m);
	if (r)
		fprintf(stderr, "zap_recv: %s\n", zap_strerror(r));
	assert_int_equal(r, 0);
	return m;
}

static void send_ok(struct zap_transport *t, const char *peer, const void *b, size_t len)
{
	int r = zap_send(t, peer, b, len, NULL);
	if (r)
		fprintf(stderr, "zap_send(%s): %s\n", peer, zap_strerror(r));
	assert_int_equal(r, 0);
}

/* No message within @ms. */
static void pump(struct zap_transport *t, unsigned ms)
{
	struct zap_ctx *ctx;
	struct zap_msg *m = NULL;
	assert_int_equal(zap_ctx_new(&ctx), 0);
	zap_ctx_set_timeout(ctx, ms * 1000000ull);
	assert_int_equal(zap_recv(t, ctx, &m), -ETIMEDOUT);
	zap_ctx_free(ctx);
}

/* @a sends "ping" to @bp, @b gets it from @ap, replies to the peer string
 * it got, and @a gets the reply from @bp. */
static void ping_pong(struct zap_transport *a, const char *ap, struct zap_transport *b,
		      const char *bp)
{
	send_ok(a, bp, "ping", 4);
	struct zap_msg *m = recv_ok(b);
	assert_int_equal(zap_msg_len(m), 4);
	assert_memory_equal(zap_msg_data(m), "ping", 4);
	if (ap)
		assert_string_equal(zap_msg_peer(m), ap);
	char back[ZAP_PEER_MAX];
	snprintf(back, sizeof(back), "%s", zap_msg_peer(m));
	zap_msg_release(m);
	send_ok(b, back, "pong", 4);
	m = recv_ok(a);
	assert_memory_equal(zap_msg_data(m), "pong", 4);
	assert_string_equal(zap_msg_peer(m), bp);
	zap_msg_release(m);
}

/* ------------------------------------------------------------------------ */
/* Addresses                                                                 */
/* ------------------------------------------------------------------------ */

static void refused(const char *addr, const char *why)
{
	struct zap_attr a = { .size = sizeof(a), .listen = addr };
	struct zap_transport *t = NULL;
	int r = zap_pick("=default", 0, &a, &t);
	assert_int_equal(r, -EINVAL);
	assert_null(t);
	if (!strstr(zap_last_error(), why))
		fprintf(stderr, "%s: %s\n", addr, zap_last_error());
	assert_non_null(strstr(zap_last_error(), why));
}

static void test_grammar(void **state)
{
	char longp[200];
	(void)state;

	refused("unix:relative.sock", "absolute path");
	refused("unix:", "absolute path");
	refused("unix:@", "abstract name is empty");
	refused("unix:/a//b", "empty component");
	refused("unix:/a/", "empty component");
	refused("unix:/a/../b", "\"..\"");
	refused("unix:/a b", "printable");
	refused("unix:@a#b", "printable");
	snprintf(longp, sizeof(longp), "unix:/%0107d", 0); /* 108 bytes */
	refused(longp, "longer than");
	snprintf(longp, sizeof(longp), "unix:@%0108d", 0);
	refused(longp, "longer than");
	/* The longest abstract name fits, and comes back as it was. */
	char ab[ZAP_PEER_MAX], got[ZAP_PEER_MAX];
	snprintf(ab, sizeof(ab), "unix:@%0107u", (unsigned)getpid());
	struct zap_transport *t = ep_listen(ab);
	assert_int_equal(zap_transport_address(t, got, sizeof(got)), 0);
	assert_string_equal(got, ab);
	/* A peer string with a relative path is refused by send. */
	assert_int_equal(zap_send(t, "unix:x.sock", "x", 1, NULL), -EINVAL);
	zap_close(t);
}

/* ------------------------------------------------------------------------ */
/* Data                                                                      */
/* ------------------------------------------------------------------------ */

struct rx_job {
	struct zap_transport *t;
	struct zap_msg *m;
};

static void *rx_main(void *arg)
{
	struct rx_job *j = arg;
	if (zap_recv(j->t, NULL, &j->m))
		j->m = NULL;
	return NULL;
}

/* Both ways, 0 B to 64 MiB: a receiving thread, since a message larger
 * than the socket buffers needs a reader while it is written. */
static void sizes_between(struct zap_transport *a, const char *ap, struct zap_transport *b,
			  const char *bp)
{
	static const size_t sizes[] = { 0, 1, 15, 16, 17, 4095, 65536, 65537, 1u << 20,
					64u << 20 };
	unsigned char *buf = malloc(64u << 20);
	assert_non_null(buf);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (int dirn = 0; dirn < 2; dirn++) {
			struct zap_transport *tx = dirn ? b : a, *rx = dirn ? a : b;
			const char *to = dirn ? ap : bp, *from = dirn ? bp : ap;
			struct rx_job j = { .t = rx };
			pthread_t th;
			zt_fill(buf, sizes[i], i * 2 + (size_t)dirn);
			assert_int_equal(pthread_create(&th, NULL, rx_main, &j), 0);
			send_ok(tx, to, buf, sizes[i]);
			pthread_join(th, NULL);
			assert_non_null(j.m);
			assert_int_equal(zap_msg_len(j.m), sizes[i]);
			if (sizes[i])
				assert_memory_equal(zap_msg_data(j.m), buf, sizes[i]);
			assert_string_equal(zap_msg_peer(j.m), from);
			zap_msg_release(j.m);
		}
	}
	free(buf);
}

static void test_sizes_path(void **state)
{
	char ap[ZAP_PEER_MAX], bp[ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *a = ep_unix(ap, "a"), *b = ep_unix(bp, "b");
	struct stat st;

	/* The socket file is there with the default mode 0600... */
	assert_int_equal(stat(bp + 5, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	sizes_between(a, ap, b, bp);
	/* The identity of a plaintext Unix peer: its credentials. */
	char id[96];
	snprintf(id, sizeof(id), "uid=%u gid=%u pid=%d", (unsigned)geteuid(),
		 (unsigned)getegid(), (int)getpid());
	send_ok(a, bp, "id", 2);
	struct zap_msg *m = recv_ok(b);
	assert_non_null(zap_msg_peer_id(m));
	assert_string_equal(zap_msg_peer_id(m), id);
	zap_msg_release(m);
	zap_close(a);
	zap_close(b);
	/* ...and gone once the endpoint closed. */
	assert_int_equal(stat(bp + 5, &st), -1);
	assert_int_equal(stat(ap + 5, &st), -1);
}

static void test_sizes_abstract(void **state)
{
	char ap[ZAP_PEER_MAX], bp[ZAP_PEER_MAX];
	(void)state;
	snprintf(ap, sizeof(ap), "unix:@zap-test-%d-a", (int)getpid());
	snprintf(bp, sizeof(bp), "unix:@zap-test-%d-b", (int)getpid());
	struct zap_transport *a = ep_listen(ap), *b = ep_listen(bp);
	sizes_between(a, ap, b, bp);
	ping_pong(a, ap, b, bp);
	/* The name is taken while b listens. */
	struct zap_attr at = { .size = sizeof(at), .listen = bp };
	struct zap_transport *t = NULL;
	assert_int_equal(zap_pick("=default", 0, &at, &t), -EADDRINUSE);
	zap_close(a);
	zap_close(b);
}

/* A TCP endpoint and a Unix one talk both ways; replies reach each. */
static void test_mixed_tcp(void **state)
{
	char up[ZAP_PEER_MAX], tp[ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *u = ep_unix(up, "u");
	struct zap_transport *t = ep_listen("127.0.0.1:0");
	assert_int_equal(zap_transport_address(t, tp, sizeof(tp)), 0);
	/* TCP -> Unix: its HELLO's loopback address is believed. */
	ping_pong(t, tp, u, up);
	zap_close(t);
	/* A wildcard TCP listener is loopback with its port to the Unix
	 * side; a fresh endpoint dials over Unix first. */
	t = ep_listen("0.0.0.0:0");
	assert_int_equal(zap_transport_address(t, tp, sizeof(tp)), 0);
	char lo[ZAP_PEER_MAX];
	snprintf(lo, sizeof(lo), "127.0.0.1:%s", strrchr(tp, ':') + 1);
	ping_pong(t, lo, u, up);
	zap_close(t);
	/* Unix -> TCP: the TCP side cannot check a Unix address; the peer
	 * is the connection's source, which replies reach. */
	t = ep_listen("127.0.0.1:0");
	assert_int_equal(zap_transport_address(t, tp, sizeof(tp)), 0);
	ping_pong(u, NULL, t, tp);
	zap_close(t);
	zap_close(u);
}

enum { ORDER_N = 100000 };

static void *order_rx(void *arg)
{
	struct zap_transport *b = arg;
	for (uint32_t k = 0; k < ORDER_N; k++) {
		struct zap_msg *m = NULL;
		uint32_t v;
		if (zap_recv(b, NULL, &m) || zap_msg_len(m) != sizeof(v))
			return (void *)1;
		memcpy(&v, zap_msg_data(m), sizeof(v));
		zap_msg_release(m);
		if (v != k) {
			fprintf(stderr, "message %u arrived as %u\n", k, v);
			return (void *)1;
		}
	}
	return NULL;
}

/* 100k messages arrive in order (a Unix socket's buffer holds a few
 * hundred small ones, so the sender waits for the reader many times). */
static void test_order_100k(void **state)
{
	char ap[ZAP_PEER_MAX], bp[ZAP_PEER_MAX];
	pthread_t th;
	void *bad;
	(void)state;
	struct zap_transport *a = ep_unix(ap, "a"), *b = ep_unix(bp, "b");
	assert_int_equal(pthread_create(&th, NULL, order_rx, b), 0);
	for (uint32_t i = 0; i < ORDER_N; i++)
		send_ok(a, bp, &i, sizeof(i));
	pthread_join(th, &bad);
	assert_null(bad);
	zap_close(a);
	zap_close(b);
}

struct sender {
	struct zap_transport *t;
	const char *to;
	uint32_t id;
	int err;
};

enum { SENDERS = 8, PER_SENDER = 5000 };

static void *sender_main(void *arg)
{
	struct sender *s = arg;
	for (uint32_t i = 0; i < PER_SENDER && !s->err; i++) {
		uint32_t v[2] = { s->id, i };
		s->err = zap_send(s->t, s->to, v, sizeof(v), NULL);
	}
	return NULL;
}

/* Eight threads of one endpoint and eight endpoints at once: every
 * message arrives, in order per sender. */
static void test_eight_senders(void **state)
{
	char bp[ZAP_PEER_MAX], ap[SENDERS][ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *b = ep_unix(bp, "b"), *a[SENDERS];
	struct sender s[SENDERS];
	pthread_t th[SENDERS];
	for (int round = 0; round < 2; round++) {
		for (uint32_t i = 0; i < SENDERS; i++) {
			a[i] = round || !i ? ep_unix(ap[i], "a") : a[0];
			s[i] = (struct sender){ .t = a[i], .to = bp, .id = i };
			assert_int_equal(pthread_create(&th[i], NULL, sender_main, &s[i]), 0);
		}
		uint32_t next[SENDERS] = { 0 };
		for (int n = 0; n < SENDERS * PER_SENDER; n++) {
			struct zap_msg *m = recv_ok(b);
			uint32_t v[2];
			assert_int_equal(zap_msg_len(m), sizeof(v));
			memcpy(v, zap_msg_data(m), sizeof(v));
			assert_true(v[0] < SENDERS);
			assert_int_equal(v[1], next[v[0]]);
			next[v[0]]++;
			assert_string_equal(zap_msg_peer(m), ap[round ? v[0] : 0]);
			zap_msg_release(m);
		}
		for (int i = 0; i < SENDERS; i++) {
			pthread_join(th[i], NULL);
			assert_int_equal(s[i].err, 0);
		}
		for (int i = 0; i < (round ? SENDERS : 1); i++)
			zap_close(a[i]);
	}
	zap_close(b);
}

static void test_self_send(void **state)
{
	char ap[ZAP_PEER_MAX];
	(void)state;
	struct zap_transport *a = ep_unix(ap, "self");
	send_ok(a, ap, "me", 2);
	struct zap_msg *m = recv_ok(a);
	assert_memory_equal(zap_msg_data(m), "me", 2);
	assert_string_equal(zap_msg_peer(m), ap);
	zap_msg_release(m);
	zap_close(a);
}

/* ------------------------------------------------------------------------ */
/* The socket file                                                           */
/* ------------------------------------------------------------------------ */

static int raw_listen(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(listen(fd, 4), 0);
	return fd;
}

static void test_socket_file(void **state)
{
	char p[ZAP_PEER_MAX], got[ZAP_PEER_MAX];
	struct zap_attr a = { .size = sizeof(a), .listen = p };
	struct zap_transport *t = NULL;
	struct stat st;
	(void)state;

	/* A regular file is never replaced. */
	path_new(p, sizeof(p), "file");
	FILE *f = fopen(p + 5, "w");
	assert_non_null(f);
	fputs("keep", f);
	fclose(f);
	assert_int_equal(zap_pick("=default", 0, &a, &t), -EADDRINUSE);
	assert_non_null(strstr(zap_last_error(), "not a socket"));
	assert_int_equal(stat(p + 5, &st), 0);
	assert_true(S_ISREG(st.st_mode) && st.st_size == 4);
	unlink(p + 5);

	/* Nor is a socket someone listens on. */
	path_new(p, sizeof(p), "live");
	int lfd = raw_listen(p + 5);
	assert_int_equal(zap_pick("=default", 0, &a, &t), -EADDRINUSE);
	assert_non_null(strstr(zap_last_error(), "another process listens"));
	assert_int_equal(stat(p + 5, &st), 0);
	close(lfd);

	/* Closed, it is stale: reused, with a logged reason. */
	zt_log_clear();
	t = ep_listen(p);
	assert_true(log_wait2("removed the stale socket", p + 5));
	assert_int_equal(zap_transport_address(t, got, sizeof(got)), 0);
	assert_string_equal(got, p);
	char q[ZAP_PEER_MAX];
	struct zap_transport *o = ep_unix(q, "other");
	ping_pong(o, q, t, p);
	zap_close(o);

	/* Someone replaced our file meanwhile: close leaves theirs alone. */
	assert_int_equal(unlink(p + 5), 0);
	f = fopen(p + 5, "w");
	assert_non_null(f);
	fclose(f);
	zap_close(t);
	assert_int_equal(stat(p + 5, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	unlink(p + 5);

	/* An explicit mode; a bad one fails the open, naming the variable. */
	setenv("ZAP_UNIX_SOCKET_MODE", "0660", 1);
	t = ep_unix(q, "mode");
	assert_int_equal(stat(q + 5, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	zap_close(t);
	setenv("ZAP_UNIX_SOCKET_MODE", "0999", 1);
	path_new(p, sizeof(p), "badmode");
	assert_int_equal(zap_pick("=default", 0, &a, &t), -EINVAL);
	assert_non_null(strstr(zap_last_error(), "ZAP_UNIX_SOCKET_MODE"));
	unsetenv("ZAP_UNIX_SOCKET_MODE");
	assert_int_equal(stat(p + 5, &st), -1);

	/* A path into a missing directory: a clear error. */
	snprintf(p, sizeof(p), "unix:%s/no/such/dir.sock", dir);
	assert_int_equal(zap_pick("=default", 0, &a, &t), -ENOENT);
	assert_non_null(strstr(zap_last_error(), "cannot listen"));
	/* Nothing listens: send says so. */
	path_new(p, sizeof(p), "nobody");
	t = ep_unix(q, "s");
	assert_int_equal(zap_send(t, p, "x", 1, NULL), -ENOENT);
	assert_non_null(strstr(zap_last_error(), "nothing listens"));
	zap_close(t);
}

/* ------------------------------------------------------------------------ */
/* Hostile local peers                                                       */
/* ------------------------------------------------------------------------ */

static int raw_connect(const char *addr)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t sl;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	const char *s = addr + 5;
	assert_true(fd >= 0);
	if (s[0] == '@') {
		memcpy(sun.sun_path + 1, s + 1, strlen(s) - 1);
		sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(s));
	} else {
		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", s);
		sl = sizeof(sun);
	}
	assert_int_equal(connect(fd, (struct sockaddr *)&sun, sl), 0);
	struct timeval tv = { .tv_sec = 3 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static size_t hello(unsigned char *p, uint64_t id, const char *addr)
{
	size_t n = zt_wire_hdr(p, 1, 24 + strlen(addr));
	zt_be64(p + n, id);
	zt_be64(p + n + 8, 42);
	zt_be64(p + n + 16, 64ull << 20);
	memcpy(p + n + 24, addr, strlen(addr));
	return n + 24 + strlen(addr);
}

static void write_all(int fd, const void *p, size_t n)
{
	assert_int_equal(write(fd, p, n), (ssize_t)n);
}

/* The endpoint closed @fd (EOF or reset within 3 s, perhaps after its
 * HELLO answer). */
static bool dropped(int fd)
{
	unsigned char b[4096];
	for (;;) {
		ssize_t k = read(fd, b, sizeof(b));
		if (k == 0 || (k < 0 && errno == ECONNRESET))
			return true;
		if (k < 0)
			return false;
	}
}

/* @b still serves a good Unix peer. */
static void served(struct zap_transport *b, const char *bp)
{
	char ap[ZAP_PEER_MAX];
	struct zap_transport *a = ep_unix(ap, "good");
	ping_pong(a, ap, b, bp);
	zap_close(a);
}

/* Each claim is refused with a reason naming our pid, and the endpoint
 * keeps serving. */
/* The mode is set before the socket has its name (issue 35): no chmod()
 * ever goes to the public path, where someone who can write the directory
 * could have swapped in a link; the socket arrives there by a rename,
 * with its mode, and no private directory is left behind. */
static void test_mode_without_window(void **state)
{
	char p[ZAP_PEER_MAX], victim[ZAP_PEER_MAX], buf[8192];
	bool attrib = false, arrived = false;
	struct stat st;
	ssize_t n;
	(void)state;

	int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	assert_true(in >= 0);
	assert_true(inotify_add_watch(in, dir, IN_CREATE | IN_ATTRIB | IN_MOVED_TO) >= 0);
	path_new(p, sizeof(p), "inplace");
	setenv("ZAP_UNIX_SOCKET_MODE", "0640", 1);
	struct zap_transport *t = ep_listen(p);
	unsetenv("ZAP_UNIX_SOCKET_MODE");
	const char *name = strrchr(p, '/') + 1;
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		for (char *q = buf; q < buf + n;) {
			const struct inotify_event *e = (const void *)q;
			if (e->len && !strcmp(e->name, name)) {
				attrib |= (e->mask & IN_ATTRIB) != 0;
				arrived |= (e->mask & (IN_MOVED_TO | IN_CREATE)) != 0;
			}
			q += sizeof(*e) + e->len;
		}
	}
	close(in);
	assert_true(arrived);
	assert_false(attrib); /* nothing changed the mode at the public name */
	assert_true(lstat(p + 5, &st) == 0 && S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0640);
	DIR *d = opendir(dir);
	struct dirent *de;
	assert_non_null(d);
	while ((de = readdir(d)))
		assert_null(strstr(de->d_name, ".zap-"));
	closedir(d);
	zap_close(t);
	/* In a directory too long for a private name beside it to fit
	 * sun_path: bound through /proc/self/fd. */
	snprintf(victim, sizeof(victim), "%s/%0*d", dir, (int)(98 - strlen(dir)), 0);
	assert_int_equal(mkdir(victim, 0700), 0);
	snprintf(p, sizeof(p), "unix:%.100s/s", victim);
	t = ep_listen(p);
	assert_true(lstat(p + 5, &st) == 0 && S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	zap_close(t);
	assert_int_equal(rmdir(victim), 0); /* empty: nothing left behind */

	/* A link planted at the path: refused, and its target untouched. */
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	int fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(fchmod(fd, 0600), 0);
	close(fd);
	path_new(p, sizeof(p), "planted");
	assert_int_equal(symlink(victim, p + 5), 0);
	struct zap_attr a = { .size = sizeof(a), .listen = p };
	assert_int_equal(zap_pick("=default", 0, &a, &t), -EADDRINUSE);
	assert_int_equal(stat(victim, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	unlink(p + 5);
	unlink(victim);
}

static void test_hostile_claims(void **state)
{
	char bp[ZAP_PEER_MAX], pid[32], claim[ZAP_PEER_MAX], file[ZAP_PEER_MAX];
	unsigned char p[512];
	(void)state;
	struct zap_transport *b = ep_unix(bp, "b");
	snprintf(pid, sizeof(pid), "pid=%d", (int)getpid());
	path_new(file, sizeof(file), "regular");
	FILE *f = fopen(file + 5, "w");
	assert_non_null(f);
	fclose(f);
	char stale[ZAP_PEER_MAX];
	path_new(stale, sizeof(stale), "stale");
	close(raw_listen(stale + 5));
	char lsock[ZAP_PEER_MAX];
	path_new(lsock, sizeof(lsock), "lsock");
	int lfd = raw_listen(lsock + 5);
	snprintf(claim, sizeof(claim), "unix:@zap-test-%d-nobody", (int)getpid());
	const struct {
		const char *addr, *why;
	} cases[] = {
		{ "192.0.2.1:5000", "only a loopback" },
		{ "10.0.0.1:80", "only a loopback" },
		{ "localhost:80", "only a loopback" },
		{ file, "not a socket owned by uid" },
		{ stale, "where nothing answers" },
		{ claim, "where nothing answers" },
		{ "unix:/nonexistent/x.sock", "not a socket owned by uid" },
		{ bp, "claims our own listen address" },
		{ "unix:relative", "malformed address" },
		{ "*:9", "malformed address" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		zt_log_clear();
		int fd = raw_connect(bp);
		write_all(fd, p, hello(p, 0x1111000000000000ull + i, cases[i].addr));
		assert_true(dropped(fd));
		close(fd);
		assert_true(log_wait2(cases[i].why, strstr(cases[i].why, "malformed") ? NULL : pid));
	}
	/* Garbage instead of a HELLO, and an id of 0. */
	zt_log_clear();
	int fd = raw_connect(bp);
	write_all(fd, "GET / HTTP/1.0\r\n\r\n", 18);
	assert_true(dropped(fd));
	close(fd);
	assert_true(log_wait2("bad magic", pid));
	/* A socket we listen on ourselves: believed (same uid), and the
	 * endpoint answers with its HELLO. */
	fd = raw_connect(bp);
	write_all(fd, p, hello(p, 0x2222, lsock));
	ssize_t k = read(fd, p, 16);
	assert_int_equal(k, 16);
	assert_memory_equal(p, "ZAPW", 4);
	close(fd);
	close(lfd);
	/* Another user's socket: only root can make one here. */
	if (geteuid() == 0) {
		char other[ZAP_PEER_MAX];
		path_new(other, sizeof(other), "other-user");
		int ofd = raw_listen(other + 5);
		assert_int_equal(chown(other + 5, 65534, 65534), 0);
		zt_log_clear();
		fd = raw_connect(bp);
		write_all(fd, p, hello(p, 0x3333, other));
		assert_true(dropped(fd));
		close(fd);
		assert_true(log_wait2("not a socket owned by uid 0", pid));
		close(ofd);
		unlink(other + 5);
	} else {
		fprintf(stderr, "# other-user socket case needs root (euid %u): not run\n",
			(unsigned)geteuid());
	}
	served(b, bp);
	unlink(file + 5);
	unlink(stale + 5);
	unlink(lsock + 5);
	zap_close(b);
}

/* A local impostor claiming a live peer's socket (same uid, so the
 * claim is believed) does not take over that peer's route. */
static void test_route_held(void **state)
{
	char ap[ZAP_PEER_MAX], bp[ZAP_PEER_MAX];
	unsigned char p[512];
	(void)state;
	struct zap_transport *a = ep_unix(ap, "a"), *b = ep_unix(bp, "b");
	ping_pong(a, ap, b, bp);
	int fd = raw_connect(bp);
	write_all(fd, p, hello(p, 0x4444, ap));
	assert_int_equal(read(fd, p, 16), 16); /* b's HELLO answer */
	pump(b, 100);
	ping_pong(b, bp, a, ap); /* b's sends to ap still reach a */
	struct timeval tv = { .tv_usec = 200000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	size_t got = 0;
	ssize_t k;
	while ((k = read(fd, p, sizeof(p))) > 0)
		got += (size_t)k;
	assert_int_equal(got, 24 + strlen(bp)); /* the rest of the HELLO only */
	close(fd);
	zap_close(a);
	zap_close(b);
}

/* Idle connections and a stalled frame are dropped on the TCP limits,
 * and a good peer is served meanwhile. */
static void test_idle_flood_and_stall(void **state)
{
	char bp[ZAP_PEER_MAX], ap[ZAP_PEER_MAX];
	unsigned char p[512] = { 0 };
	enum { N = 200 };
	int fds[N];
	(void)state;
	setenv("ZAP_TCP_HANDSHAKE_MS", "300", 1);
	setenv("ZAP_TCP_STALL_MS", "300", 1);
	struct zap_transport *b = ep_unix(bp, "b");
	unsetenv("ZAP_TCP_HANDSHAKE_MS");
	unsetenv("ZAP_TCP_STALL_MS");
	zt_log_clear();
	for (int i = 0; i < N; i++)
		fds[i] = raw_connect(bp);
	served(b, bp);
	for (int i = 0; i < N; i++) {
		assert_true(dropped(fds[i]));
		close(fds[i]);
	}
	assert_true(log_wait2("no HELLO within the handshake timeout", "uid="));
	/* A good HELLO, then half a frame, then nothing. */
	struct zap_transport *a = ep_unix(ap, "a");
	int fd = raw_connect(bp);
	size_t n = hello(p, 0x5555, ap);
	n += zt_wire_hdr(p + n, 2, 1000);
	write_all(fd, p, n + 10);
	zt_log_clear();
	pump(b, 500);
	assert_true(dropped(fd));
	close(fd);
	assert_true(log_wait2("a partial frame made no progress", "pid="));
	served(b, bp);
	zap_close(a);
	zap_close(b);
}

static int setup_dir(void **state)
{
	(void)state;
	/* Short enough for sun_path with the file names below. */
	return zt_mkdtemp(dir, sizeof(dir), "zap-unix") ? 0 : -1;
}

/* Fails if a socket file was left behind: close unlinks its own. */
static int teardown_dir(void **state)
{
	(void)state;
	return rmdir(dir);
}

int main(void)
{
	static const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grammar),
		cmocka_unit_test(test_sizes_path),
		cmocka_unit_test(test_sizes_abstract),
		cmocka_unit_test(test_mixed_tcp),
		cmocka_unit_test(test_order_100k),
		cmocka_unit_test(test_eight_senders),
		cmocka_unit_test(test_self_send),
		cmocka_unit_test(test_socket_file),
		cmocka_unit_test(test_mode_without_window),
		cmocka_unit_test(test_hostile_claims),
		cmocka_unit_test(test_route_held),
		cmocka_unit_test(test_idle_flood_and_stall),
	};
	alarm(zt_timeout_ms(240000) / 1000); /* scaled (tests/README.md) */
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	setenv("ZAP_TRANSPORT_QUIET", "1", 1);
	zap_set_log_handler(zt_log_capture, NULL);
	zap_set_log_level(ZAP_LOG_INFO);
	return cmocka_run_group_tests_name("plugin-default-unix", tests, setup_dir,
					   teardown_dir);
}
