/* SPDX-License-Identifier: MIT */
/*
 * Reading an endpoint's TLS files (certificate, key, CA bundle, pin file)
 * safely: each is opened once, non-blocking (a FIFO or a device at the
 * path must not hang the open), must be a regular file on that open
 * descriptor, is read through it with a bound, and gets the checks its
 * role needs:
 *  - the key: owned by us or root, no access for group or others (ssh's
 *    rule for identity files);
 *  - the trust files (CA bundle, pin file), which decide who is delivered
 *    as an authenticated peer: owned by us or root, writable by the owner
 *    only, and so is every directory on the way to them, along the path as
 *    given and along the path of the file actually opened (ssh's rule for
 *    authorized_keys), except that a sticky directory (/tmp) may be
 *    writable by others, who cannot rename or remove our entries in it;
 *  - the certificate (public): only the regular-file rule and the bound.
 * Symbolic links are followed, for all four: the checks apply to the file
 * and the directories they lead to as well as to those that hold them.
 *
 * No shared state.
 */
#include "tls_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

/* Free @b, @n of whose bytes may be secret. */
static void drop(char *b, size_t n)
{
	OPENSSL_cleanse(b, n);
	free(b);
}

/* Read the rest of @fd, at most @max bytes. */
static int read_fd(int fd, const char *var, const char *path, size_t max, char **buf,
		   size_t *len, char *why, size_t whylen)
{
	size_t cap = 4096, n = 0;
	char *b = malloc(cap);

	if (!b)
		return -ENOMEM;
	for (;;) {
		if (n == cap) {
			if (cap >= max) {
				snprintf(why, whylen, "%s: %s is larger than %zu bytes",
					 var, path, max);
				drop(b, n);
				return -EFBIG;
			}
			char *nb = malloc(cap * 2);
			if (!nb) {
				drop(b, n);
				return -ENOMEM;
			}
			memcpy(nb, b, n);
			drop(b, n);
			b = nb;
			cap *= 2;
		}
		ssize_t k = read(fd, b + n, cap - n);
		if (k > 0) {
			n += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int e = errno;
			snprintf(why, whylen, "%s: read %s: %s", var, path, strerror(e));
			drop(b, n);
			return -e;
		}
		break;
	}
	*buf = b;
	*len = n;
	return 0;
}

/* Whether a directory @st may lie on the way to a trust file. */
static int check_dir(const char *var, const char *dir, const struct stat *st,
		     const char *path, char *why, size_t whylen)
{
	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		snprintf(why, whylen,
			 "%s: directory %s (on the way to %s) is owned by uid %u, neither this user (%u) nor root: its owner can replace the file (keep it in a directory of yours)",
			 var, dir, path, (unsigned)st->st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if ((st->st_mode & 022) && !(st->st_mode & S_ISVTX)) {
		snprintf(why, whylen,
			 "%s: directory %s (on the way to %s) is writable by group or others (mode %04o): they can replace the file (chmod go-w %s, or keep the file elsewhere)",
			 var, dir, path, (unsigned)(st->st_mode & 07777), dir);
		return -EPERM;
	}
	return 0;
}

/* Every directory above @full (absolute; "/" included), stat()ed by name. */
static int check_dirs(const char *var, const char *full, const char *path, char *why,
		      size_t whylen)
{
	char dir[PATH_MAX];
	struct stat st;
	size_t n = strlen(full);

	if (n >= sizeof(dir)) {
		snprintf(why, whylen, "%s: %s: path too long", var, path);
		return -ENAMETOOLONG;
	}
	memcpy(dir, full, n + 1);
	for (;;) {
		char *slash = strrchr(dir, '/');

		if (!slash)
			return 0;
		if (slash == dir)
			slash[1] = '\0'; /* "/" itself, last */
		else
			*slash = '\0';
		if (stat(dir, &st)) {
			int e = errno;
			snprintf(why, whylen, "%s: %s: %s", var, dir, strerror(e));
			return -e;
		}
		int r = check_dir(var, dir, &st, path, why, whylen);
		if (r || !strcmp(dir, "/"))
			return r;
	}
}

/* The trust-file rules for @path, open as @fd with @st. */
static int check_trust(int fd, const struct stat *st, const char *var, const char *path,
		       char *why, size_t whylen)
{
	char given[PATH_MAX], opened[PATH_MAX], link[64];
	ssize_t n;
	int r;

	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		snprintf(why, whylen,
			 "%s: %s is owned by uid %u, neither this user (%u) nor root: its owner decides whom this endpoint trusts (chown %u %s)",
			 var, path, (unsigned)st->st_uid, (unsigned)geteuid(),
			 (unsigned)geteuid(), path);
		return -EPERM;
	}
	if (st->st_mode & 022) {
		snprintf(why, whylen,
			 "%s: %s is writable by group or others (mode %04o): they could add whom this endpoint trusts (chmod go-w %s)",
			 var, path, (unsigned)(st->st_mode & 07777), path);
		return -EPERM;
	}
	/* The path as given (where a symbolic link on the way lives)... */
	if (path[0] == '/') {
		snprintf(given, sizeof(given), "%s", path);
	} else {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof(cwd))) {
			snprintf(why, whylen, "%s: %s: getcwd: %s", var, path,
				 strerror(errno));
			return -EPERM;
		}
		if ((size_t)snprintf(given, sizeof(given), "%s/%s", cwd, path) >=
		    sizeof(given)) {
			snprintf(why, whylen, "%s: %s: path too long", var, path);
			return -ENAMETOOLONG;
		}
	}
	r = check_dirs(var, given, path, why, whylen);
	if (r)
		return r;
	/* ...and the file that was opened, wherever the links led. */
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, opened, sizeof(opened) - 1);
	if (n <= 0 || opened[0] != '/') {
		snprintf(why, whylen,
			 "%s: %s: cannot tell which file was opened (%s: %s; is /proc mounted?)",
			 var, path, link, n < 0 ? strerror(errno) : "not a path");
		return -EPERM;
	}
	opened[n] = '\0';
	return check_dirs(var, opened, path, why, whylen);
}

int ztls_file_read(const char *var, const char *path, enum ztls_file_kind kind,
		   size_t max, char **buf, size_t *len, char *why, size_t whylen)
{
	struct stat st;
	int fd, r;

	*buf = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		r = -errno;
		snprintf(why, whylen, "%s: cannot open %s: %s", var, path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		snprintf(why, whylen, "%s: fstat %s: %s", var, path, strerror(-r));
		goto out;
	}
	r = -EINVAL;
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s: %s is not a regular file", var, path);
		goto out;
	}
	if ((size_t)st.st_size > max) {
		snprintf(why, whylen, "%s: %s is larger than %zu bytes", var, path, max);
		r = -EFBIG;
		goto out;
	}
	r = -EPERM;
	if (kind == ZTLS_FILE_SECRET && (st.st_mode & 077)) {
		snprintf(why, whylen,
			 "%s: permissions %04o for %s are too open: a private key must not be accessible by group or others (chmod 600 %s)",
			 var, (unsigned)(st.st_mode & 07777), path, path);
		goto out;
	}
	if (kind == ZTLS_FILE_SECRET && st.st_uid != geteuid() && st.st_uid != 0) {
		snprintf(why, whylen,
			 "%s: %s is owned by uid %u, neither this user (%u) nor root",
			 var, path, (unsigned)st.st_uid, (unsigned)geteuid());
		goto out;
	}
	r = kind == ZTLS_FILE_TRUST ? check_trust(fd, &st, var, path, why, whylen) : 0;
	if (!r)
		r = read_fd(fd, var, path, max, buf, len, why, whylen);
out:
	close(fd);
	return r;
}
