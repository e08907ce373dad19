/* SPDX-License-Identifier: MIT */
/*
 * Checking, loading and probing one plugin file: what both libzap (for an
 * in-process scan, and for loading the winner of an out-of-process one)
 * and the probe helper (core/zap-probe.c) do with a candidate.
 *
 * Trust rules (README "The plugin host"):
 *  - every component of a plugin directory's path, from "/", is opened
 *    with O_NOFOLLOW (a symbolic link anywhere on the way is refused, never
 *    followed) and must be owned by root or the effective user and be
 *    writable by its owner only; an ancestor that others may write is
 *    accepted only with the sticky bit (/tmp), where they cannot rename or
 *    remove our entries;
 *  - a plugin file is opened with O_NOFOLLOW, checked with fstat() (a
 *    regular file, owned by root or the effective user, writable by its
 *    owner only), and that same open file is what dlopen() maps, through
 *    /proc/self/fd/N.
 * What these rules do not give: dlopen() runs the constructors of the
 * plugin and of every library it needs before the descriptor can be read,
 * so the descriptor check guards the ABI, not against hostile code. The
 * ownership rules decide whose code may run at all; probing out of process
 * keeps a crashing or hanging plugin from taking the application down.
 *
 * /proc/self/fd/N is a name the dynamic loader remembers: while an object
 * loaded under it stays mapped (a loaded plugin; a rejected one linked
 * -z nodelete, or holding C++ unique symbols, that dlclose() cannot
 * unmap), a later dlopen() of the same name returns that object without
 * looking at the file. So descriptor N is never closed while its object
 * may be mapped, and a name that is already taken is never used.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zap-private.h"

const char *zap__unsafe_owner_or_mode(const struct stat *st, bool ancestor, char *buf,
				      size_t len, const char *what)
{
	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		snprintf(buf, len, "%s owned by uid %u (only root or uid %u are trusted)",
			 what, (unsigned)st->st_uid, (unsigned)geteuid());
		return buf;
	}
	/* Sticky: others may add entries but not rename or remove ours. */
	if (ancestor && S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX))
		return NULL;
	if (st->st_mode & S_IWOTH) {
		snprintf(buf, len, "world-writable %s", what);
		return buf;
	}
	if (st->st_mode & S_IWGRP) {
		snprintf(buf, len, "group-writable %s (gid %u)", what,
			 (unsigned)st->st_gid);
		return buf;
	}
	return NULL;
}

/* Open @comp in @dfd as a directory, not following a symbolic link. */
static int open_component(int dfd, const char *comp, const char *sofar, char *why,
			  size_t len)
{
	struct stat st;
	int fd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0)
		return fd;
	if ((errno == ELOOP || errno == ENOTDIR) &&
	    !fstatat(dfd, comp, &st, AT_SYMLINK_NOFOLLOW) && S_ISLNK(st.st_mode)) {
		snprintf(why, len, "%s is a symbolic link (not followed)", sofar);
		errno = ELOOP;
	} else if (errno == ENOENT) {
		snprintf(why, len, "missing");
		errno = ENOENT;
	} else {
		int e = errno;

		snprintf(why, len, "%s: %s", sofar, strerror(e));
		errno = e;
	}
	return -1;
}

/*
 * @dir as an absolute path to walk from "/": a relative one is joined to
 * the working directory, whose path getcwd() gives without symbolic
 * links. NULL with @why and errno set when there is none.
 */
static char *absolute_dir(const char *dir, char *why, size_t len)
{
	char cwd[4096];
	char *path;

	if (dir[0] == '/') {
		path = strdup(dir);
	} else {
		if (!getcwd(cwd, sizeof(cwd))) {
			int e = errno;

			snprintf(why, len, "relative path, and getcwd: %s", strerror(e));
			errno = e;
			return NULL;
		}
		if (asprintf(&path, "%s/%s", cwd, dir) < 0)
			path = NULL;
	}
	if (!path) {
		snprintf(why, len, "out of memory");
		errno = ENOMEM;
	}
	return path;
}

/*
 * Whether the directory open as @fd (@sofar, "" for "/") may hold or lead
 * to plugins: an ancestor (not @last) may be sticky instead of writable
 * by its owner only. -1 with @why and errno set when not.
 */
static int check_dir(int fd, bool last, const char *sofar, char *why, size_t len)
{
	struct stat st;
	const char *bad;
	char buf[200];

	if (fstat(fd, &st)) {
		snprintf(why, len, "%s: %s", sofar[0] ? sofar : "/", strerror(errno));
		return -1;
	}
	bad = zap__unsafe_owner_or_mode(&st, !last, buf, sizeof(buf),
					last ? "directory" : "parent directory");
	if (bad) {
		if (last)
			snprintf(why, len, "%s", bad);
		else
			snprintf(why, len, "%s %s", bad, sofar[0] ? sofar : "/");
		errno = EPERM;
		return -1;
	}
	return 0;
}

/*
 * One step down from @fd into component @c, appended to @sofar (@size
 * bytes): '..' is refused, since the walk checks each directory it enters
 * and never goes back up. The new descriptor, or -1 with @why and errno.
 */
static int enter_dir(int fd, const char *c, char *sofar, size_t size, char *why,
		     size_t len)
{
	if (!strcmp(c, "..")) {
		snprintf(why, len, "'..' in the path (give the directory itself)");
		errno = EINVAL;
		return -1;
	}
	if (strlen(sofar) + strlen(c) + 2 > size) {
		snprintf(why, len, "path too long");
		errno = ENAMETOOLONG;
		return -1;
	}
	strcat(sofar, "/");
	strcat(sofar, c);
	return open_component(fd, c, sofar, why, len);
}

int zap__open_dir(const char *dir, char *why, size_t len)
{
	char *path, *save = NULL, sofar[4096] = "";
	int fd, e;

	path = absolute_dir(dir, why, len);
	if (!path)
		return -1;
	fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, len, "/: %s", strerror(errno));
		goto fail;
	}
	for (char *c = strtok_r(path, "/", &save);; c = strtok_r(NULL, "/", &save)) {
		int next;

		while (c && !strcmp(c, "."))
			c = strtok_r(NULL, "/", &save);
		if (check_dir(fd, c == NULL, sofar, why, len))
			goto fail;
		if (!c)
			break;
		next = enter_dir(fd, c, sofar, sizeof(sofar), why, len);
		if (next < 0)
			goto fail;
		close(fd);
		fd = next;
	}
	free(path);
	return fd;
fail:
	e = errno;
	if (fd >= 0)
		close(fd);
	free(path);
	errno = e;
	return -1;
}

int zap__open_checked(int dfd, const char *file, struct stat *st, const char *links,
		      char *why, size_t len)
{
	char buf[200];
	const char *bad;
	/* O_NONBLOCK: a FIFO posing as the file must not hang the caller. */
	int fd = openat(dfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0) {
		if (errno == ELOOP)
			snprintf(why, len, "symbolic link (%s)", links);
		else
			snprintf(why, len, "cannot open: %s", strerror(errno));
		return -1;
	}
	if (fstat(fd, st))
		snprintf(why, len, "fstat: %s", strerror(errno));
	else if (!S_ISREG(st->st_mode))
		snprintf(why, len, "not a regular file");
	else if ((bad = zap__unsafe_owner_or_mode(st, false, buf, sizeof(buf), "file")))
		snprintf(why, len, "%s", bad);
	else
		return fd;
	close(fd);
	return -1;
}

int zap__open_plugin(int dfd, const char *file, struct stat *st, struct zap_outcome *o)
{
	int fd = zap__open_checked(dfd, file, st, "plugins must be regular files",
				   o->reason, sizeof(o->reason));

	if (fd < 0)
		o->state = ZAP_PLUGIN_REFUSED;
	return fd;
}

/* Whether the dynamic loader already knows an object by @fdpath. */
static bool name_taken(const char *fdpath)
{
	void *h = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);

	if (!h)
		return false;
	dlclose(h);
	return true;
}

/*
 * The /proc/self/fd name to dlopen() *@fdp through, in @fdpath (@size
 * bytes): a name some object still holds (one dlclose() could not unmap)
 * moves to a descriptor number nobody used, keeping the old one open for
 * good so that its number is not handed out again either. -1 with @o
 * saying why when there is none.
 */
static int fd_name(int *fdp, const char *path, char *fdpath, size_t size,
		   struct zap_outcome *o)
{
	struct stat st;
	int fd = *fdp;

	snprintf(fdpath, size, "/proc/self/fd/%d", fd);
	/* Without /proc the loader would say the plugin file is missing. */
	if (stat(fdpath, &st)) {
		o->state = ZAP_PLUGIN_DLOPEN_FAILED;
		snprintf(o->reason, sizeof(o->reason),
			 "cannot load through %s: %s (plugins are loaded from their checked "
			 "open file through /proc/self/fd: is /proc mounted?)",
			 fdpath, strerror(errno));
		return -1;
	}
	for (int tries = 0; name_taken(fdpath); tries++) {
		int nfd = tries < 16 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;

		if (nfd < 0) {
			o->state = ZAP_PLUGIN_DLOPEN_FAILED;
			snprintf(o->reason, sizeof(o->reason),
				 "the dynamic loader already holds an object as %s, or this very "
				 "file under another name",
				 fdpath);
			return -1;
		}
		zap__log(ZAP_LOG_DEBUG, "loader", "%s is taken; loading %s through fd %d",
			 fdpath, path, nfd);
		fd = *fdp = nfd; /* the old descriptor is left open on purpose */
		snprintf(fdpath, size, "/proc/self/fd/%d", fd);
	}
	return 0;
}

/* dlopen() failed: its error, naming the real file, not the descriptor path. */
static void dlopen_failed(const char *path, const char *fdpath, struct zap_outcome *o)
{
	const char *e = dlerror();
	size_t n = strlen(fdpath);

	o->state = ZAP_PLUGIN_DLOPEN_FAILED;
	if (e && !strncmp(e, fdpath, n))
		snprintf(o->reason, sizeof(o->reason), "%s%s", path, e + n);
	else
		snprintf(o->reason, sizeof(o->reason), "%s", e ? e : "unknown error");
}

/*
 * @h has no descriptor symbol: a plugin for another ABI names its
 * descriptor differently, and is told apart from a file that is no plugin.
 */
static void no_symbol(void *h, struct zap_outcome *o)
{
	char other[32];

	o->state = ZAP_PLUGIN_NO_SYMBOL;
	snprintf(o->reason, sizeof(o->reason), "no symbol %s", ZAP_PLUGIN_SYMBOL);
	for (unsigned v = 0; v < 10; v++) {
		if (v == ZAP_PLUGIN_ABI_MAJOR)
			continue;
		snprintf(other, sizeof(other), "zap_plugin_v%u", v);
		if (dlsym(h, other)) {
			o->state = ZAP_PLUGIN_ABI_MISMATCH;
			snprintf(o->reason, sizeof(o->reason),
				 "exports %s: ABI major %u (host supports %u)", other, v,
				 ZAP_PLUGIN_ABI_MAJOR);
			break;
		}
	}
}

/*
 * The descriptor @d of @h, checked: a data object of the size and ABI this
 * host expects (zap__validate()). NULL with @o saying why when not.
 */
static const struct zap_plugin *checked_descriptor(void *h, const char *name,
						   struct zap_outcome *o)
{
	const struct zap_plugin *d = dlsym(h, ZAP_PLUGIN_SYMBOL);
	const ElfW(Sym) *sym = NULL;
	Dl_info info;

	if (!d) {
		no_symbol(h, o);
		return NULL;
	}
	if (!dladdr1(d, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
	    ELF64_ST_TYPE(sym->st_info) != STT_OBJECT) {
		o->state = ZAP_PLUGIN_INVALID;
		snprintf(o->reason, sizeof(o->reason), "%s is not a data object",
			 ZAP_PLUGIN_SYMBOL);
		return NULL;
	}
	o->state = zap__validate(d, sym->st_size, name, o->reason, sizeof(o->reason));
	if (o->state != ZAP_PLUGIN_LOADED)
		return NULL;
	return d;
}

const struct zap_plugin *zap__dlopen_plugin(int *fdp, const char *path, const char *name,
					    void **handle, bool *pinned,
					    struct zap_outcome *o)
{
	char fdpath[64];
	const struct zap_plugin *d;
	void *h;

	*pinned = false;
	*handle = NULL;
	if (fd_name(fdp, path, fdpath, sizeof(fdpath), o))
		return NULL;
	h = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		dlopen_failed(path, fdpath, o);
		return NULL;
	}
	d = checked_descriptor(h, name, o);
	if (d) {
		o->rank = d->rank;
		snprintf(o->version, sizeof(o->version), "%s", d->version);
		*handle = h;
		*pinned = true; /* loaded: its name stays taken */
		return d;
	}
	/* Rejected: a name dlclose() could not free keeps its descriptor. */
	dlclose(h);
	if (name_taken(fdpath)) {
		*pinned = true;
		zap__log(ZAP_LOG_DEBUG, "loader",
			 "%s stays mapped after dlclose (-z nodelete?); fd %d kept open",
			 path, *fdp);
	}
	return NULL;
}

void zap__run_probe(const struct zap_plugin *d, struct zap_outcome *o)
{
	struct zap_probe_info info;
	enum zap_probe_result r;

	memset(&info, 0, sizeof(info));
	info.size = sizeof(info);
	info.caps.size = sizeof(info.caps);
	r = d->ops->probe(&zap__host, &info);
	info.reason[sizeof(info.reason) - 1] = '\0';
	info.detail[sizeof(info.detail) - 1] = '\0';
	memcpy(o->reason, info.reason, sizeof(o->reason));
	memcpy(o->detail, info.detail, sizeof(o->detail));
	switch (r) {
	case ZAP_PROBE_OK:
		o->state = ZAP_PLUGIN_LOADED;
		o->caps = info.caps;
		o->caps.size = sizeof(o->caps);
		break;
	case ZAP_PROBE_NOT_PRESENT:
		o->state = ZAP_PLUGIN_NOT_PRESENT;
		break;
	case ZAP_PROBE_ERROR:
		o->state = ZAP_PLUGIN_ERROR;
		break;
	default:
		o->state = ZAP_PLUGIN_ERROR;
		snprintf(o->reason, sizeof(o->reason),
			 "probe returned %d, not a zap_probe_result", (int)r);
	}
}
