/* SPDX-License-Identifier: MIT */
/*
 * The plugin host (docs/loader.md): scan the plugin directories
 * once, check every candidate, probe the valid ones (out of process by
 * default), keep a load report with one row per candidate, and load into
 * this process only the plugin a pick chooses.
 *
 * In order:
 *  - each directory is opened one path component at a time from "/"
 *    without following symbolic links, and refused whole if any component
 *    is unsafe (load.c states the owner and mode rules);
 *  - only regular files named libzap-<name>.so, <name> in [a-z0-9_]+, are
 *    candidates; the first directory that holds a name wins, later copies
 *    are reported as shadowed (the built-in default holds "default");
 *  - a candidate is opened (O_NOFOLLOW) and checked with fstat();
 *  - by default every checked candidate is then handed, as that open file,
 *    to a helper process that loads it, checks its descriptor and probes it
 *    (probe-out.c): a crash or hang there is a row in the report. With
 *    ZAP_PROBE_INPROCESS=1 or ZAP_SCAN_INPROCESS this process does it
 *    itself, as programs that cannot spawn need;
 *  - the first time a pick chooses a plugin probed out of process,
 *    zap__load() opens and checks its directory and file again, makes sure
 *    the file is the one probed, and loads it through /proc/self/fd.
 *
 * The descriptor check guards the ABI, not against hostile code: dlopen()
 * runs constructors first. The ownership rules decide whose code runs;
 * probing out of process keeps a faulty plugin from taking the program
 * down, and keeps plugins a program does not pick out of it.
 *
 * Locking: scan.lock serialises the scan and every zap__load(); rows are
 * not moved or freed after the scan (see struct zap_prec).
 */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "zap-private.h"

#define DEFAULT_PROBE_TIMEOUT_MS 5000

struct dirrec {
	char *path;
	const char *source;
	char *status;
};

static struct {
	pthread_mutex_t lock;
	bool done;
	bool inprocess;
	unsigned timeout_ms;
	char *program_path; /* zap_scan_attr.plugin_path */
	struct zap_prec *recs;
	size_t n;
	struct dirrec *dirs;
	size_t ndirs;
	const char **registered;
	int nregistered;
	/* Checked candidates waiting to be probed (scan time only). */
	struct zap_probe_job *jobs;
	size_t *job_rec; /* index into recs */
	size_t njobs;
} scan = { .lock = PTHREAD_MUTEX_INITIALIZER };

static char *xstrdup(const char *s)
{
	char *d = strdup(s ? s : "");

	if (!d)
		abort(); /* a few bytes at start-up; nothing sensible remains */
	return d;
}

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	return s;
}

static void *xreallocarray(void *p, size_t n, size_t size)
{
	p = reallocarray(p, n, size);
	if (!p)
		abort();
	return p;
}

static const char *const state_names[] = {
	[ZAP_PLUGIN_LOADED] = "loaded",
	[ZAP_PLUGIN_NOT_PRESENT] = "not present",
	[ZAP_PLUGIN_ERROR] = "error",
	[ZAP_PLUGIN_NO_SYMBOL] = "no symbol",
	[ZAP_PLUGIN_ABI_MISMATCH] = "ABI mismatch",
	[ZAP_PLUGIN_INVALID] = "invalid",
	[ZAP_PLUGIN_REFUSED] = "refused",
	[ZAP_PLUGIN_SHADOWED] = "shadowed",
	[ZAP_PLUGIN_DLOPEN_FAILED] = "dlopen failed",
};

ZAP_EXPORT const char *zap_plugin_state_name(enum zap_plugin_state s)
{
	if ((unsigned)s >= ZAP_ARRAY_SIZE(state_names))
		return "?";
	return state_names[s];
}

/* libzap-<name>.so with <name> in [a-z0-9_]+; copies <name> to @name. */
static bool candidate_name(const char *file, char name[ZAP_NAME_MAX])
{
	static const char pre[] = "libzap-", suf[] = ".so";
	size_t len = strlen(file), n;

	if (len <= strlen(pre) + strlen(suf) || strncmp(file, pre, strlen(pre)) ||
	    strcmp(file + len - strlen(suf), suf))
		return false;
	n = len - strlen(pre) - strlen(suf);
	if (n >= ZAP_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = file[strlen(pre) + i];

		if (!(islower((unsigned char)c) || isdigit((unsigned char)c) || c == '_'))
			return false;
	}
	memcpy(name, file + strlen(pre), n);
	name[n] = '\0';
	return true;
}

#define OP_CHECK(field)                                        \
	{                                                      \
#field, offsetof(struct zap_plugin_ops, field) \
	}

enum zap_plugin_state zap__validate(const struct zap_plugin *d, size_t symsize,
				    const char *expect_name, char *why, size_t len)
{
	static const struct {
		const char *name;
		size_t off;
	} mandatory[] = {
		OP_CHECK(probe), OP_CHECK(open), OP_CHECK(shutdown), OP_CHECK(destroy),
		OP_CHECK(send),  OP_CHECK(recv), OP_CHECK(caps),
	};
	const struct zap_plugin_ops *ops;

	/* The ELF symbol size bounds what may be read at all. */
	if (symsize < offsetof(struct zap_plugin, rank)) {
		snprintf(why, len, "descriptor too short (symbol is %zu bytes)", symsize);
		return ZAP_PLUGIN_INVALID;
	}
	if (d->abi_major != ZAP_PLUGIN_ABI_MAJOR) {
		snprintf(why, len, "ABI major %u (host supports %u)", d->abi_major,
			 ZAP_PLUGIN_ABI_MAJOR);
		return ZAP_PLUGIN_ABI_MISMATCH;
	}
	if (d->size < ZAP_PLUGIN_MIN_SIZE || symsize < ZAP_PLUGIN_MIN_SIZE ||
	    symsize < d->size) {
		snprintf(why, len,
			 "descriptor too short (%u bytes declared, %zu in the symbol, need %zu)",
			 d->size, symsize, (size_t)ZAP_PLUGIN_MIN_SIZE);
		return ZAP_PLUGIN_INVALID;
	}
	if (strnlen(d->name, sizeof(d->name)) == sizeof(d->name) ||
	    strnlen(d->version, sizeof(d->version)) == sizeof(d->version)) {
		snprintf(why, len, "descriptor name or version not NUL-terminated");
		return ZAP_PLUGIN_INVALID;
	}
	if (strcmp(d->name, expect_name)) {
		snprintf(why, len, "name '%s' does not match file name 'libzap-%s.so'",
			 d->name, expect_name);
		return ZAP_PLUGIN_INVALID;
	}
	ops = d->ops;
	if (!ops) {
		snprintf(why, len, "no ops table");
		return ZAP_PLUGIN_INVALID;
	}
	if (ops->size < ZAP_PLUGIN_OPS_MIN_SIZE) {
		snprintf(why, len, "ops table too short (%zu bytes, need %zu)", ops->size,
			 (size_t)ZAP_PLUGIN_OPS_MIN_SIZE);
		return ZAP_PLUGIN_INVALID;
	}
	for (size_t i = 0; i < ZAP_ARRAY_SIZE(mandatory); i++) {
		void *fn;

		memcpy(&fn, (const char *)ops + mandatory[i].off, sizeof(fn));
		if (!fn) {
			snprintf(why, len, "mandatory op '%s' missing",
				 mandatory[i].name);
			return ZAP_PLUGIN_INVALID;
		}
	}
	return ZAP_PLUGIN_LOADED;
}

static struct zap_prec *add_rec(const char *name, const char *path)
{
	struct zap_prec *r;

	scan.recs = xreallocarray(scan.recs, scan.n + 1, sizeof(*scan.recs));
	r = &scan.recs[scan.n++];
	memset(r, 0, sizeof(*r));
	r->name = xstrdup(name);
	r->path = xstrdup(path);
	r->reason = "";
	r->detail = "";
	r->version = "";
	r->caps.size = sizeof(r->caps);
	return r;
}

static void finish_rec(struct zap_prec *r, const struct zap_outcome *o,
		       const struct zap_plugin *d)
{
	r->state = o->state;
	r->rank = o->rank;
	r->reason = xstrdup(o->reason);
	r->detail = xstrdup(o->detail);
	r->version = xstrdup(o->version);
	if (r->state == ZAP_PLUGIN_LOADED)
		r->caps = o->caps;
	r->desc = d;

	switch ((int)r->state) {
	case ZAP_PLUGIN_LOADED:
		zap__log(ZAP_LOG_DEBUG, "loader", "%s: loaded (rank %d, %s)", r->path,
			 r->rank, r->reason);
		break;
	case ZAP_PLUGIN_NOT_PRESENT: /* expected on this host: quiet */
		zap__log(ZAP_LOG_DEBUG, "loader", "%s: not present: %s", r->path,
			 r->reason);
		break;
	case ZAP_PLUGIN_ERROR:
		zap__log(ZAP_LOG_WARN, "loader", "transport '%s' (%s): probe error: %s",
			 r->name, r->path, r->reason);
		break;
	case ZAP_PLUGIN_SHADOWED:
		zap__log(ZAP_LOG_INFO, "loader", "%s: %s", r->path, r->reason);
		break;
	default:
		zap__log(ZAP_LOG_WARN, "loader", "%s: %s: %s", r->path,
			 zap_plugin_state_name(r->state), r->reason);
	}
}

static const struct zap_prec *find_rec(const char *name)
{
	for (size_t i = 0; i < scan.n; i++)
		if (scan.recs[i].state != ZAP_PLUGIN_SHADOWED &&
		    !strcmp(scan.recs[i].name, name))
			return &scan.recs[i];
	return NULL;
}

static void remember_file(struct zap_prec *r, const struct stat *st)
{
	r->dev = st->st_dev;
	r->ino = st->st_ino;
	r->file_size = st->st_size;
	r->mtime = st->st_mtim;
}

static bool same_file(const struct zap_prec *r, const struct stat *st)
{
	return r->dev == st->st_dev && r->ino == st->st_ino &&
	       r->file_size == st->st_size && r->mtime.tv_sec == st->st_mtim.tv_sec &&
	       r->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Check one candidate now; queue it for probing, or finish its row. */
static void scan_file(int dfd, const char *dir, const char *file, const char *name)
{
	char *path = xasprintf("%s/%s", dir, file);
	const struct zap_prec *first = find_rec(name);
	/* add_rec() may move the records: keep the string, not the record. */
	const char *first_path = first ? first->path : NULL;
	struct zap_prec *r = add_rec(name, path);
	struct zap_outcome o;
	struct stat st;
	int fd;

	memset(&o, 0, sizeof(o));
	free(path);
	if (first_path) {
		o.state = ZAP_PLUGIN_SHADOWED;
		snprintf(o.reason, sizeof(o.reason), "shadowed by %s", first_path);
		finish_rec(r, &o, NULL);
		return;
	}
	fd = zap__open_plugin(dfd, file, &st, &o);
	if (fd < 0) {
		finish_rec(r, &o, NULL);
		return;
	}
	remember_file(r, &st);
	scan.jobs = xreallocarray(scan.jobs, scan.njobs + 1, sizeof(*scan.jobs));
	scan.job_rec = xreallocarray(scan.job_rec, scan.njobs + 1, sizeof(*scan.job_rec));
	memset(&scan.jobs[scan.njobs], 0, sizeof(scan.jobs[0]));
	scan.jobs[scan.njobs].fd = fd;
	scan.job_rec[scan.njobs++] = (size_t)(r - scan.recs);
}

/* Load, check and probe @j here. The descriptor when valid, else NULL. */
static const struct zap_plugin *probe_here(struct zap_probe_job *j)
{
	const struct zap_plugin *d;
	bool pinned;
	void *h;

	d = zap__dlopen_plugin(&j->fd, j->path, j->name, &h, &pinned, &j->o);
	if (d)
		zap__run_probe(d, &j->o);
	/* A loaded (or unloadable) object keeps its descriptor: the dynamic
	 * loader knows it as /proc/self/fd/N. */
	if (!pinned)
		close(j->fd);
	return d;
}

/* Probe every queued candidate and finish its row. */
static void probe_queued(void)
{
	for (size_t i = 0; i < scan.njobs; i++) {
		scan.jobs[i].path = scan.recs[scan.job_rec[i]].path;
		scan.jobs[i].name = scan.recs[scan.job_rec[i]].name;
	}
	if (scan.inprocess) {
		for (size_t i = 0; i < scan.njobs; i++) {
			const struct zap_plugin *d = probe_here(&scan.jobs[i]);

			finish_rec(&scan.recs[scan.job_rec[i]], &scan.jobs[i].o, d);
		}
	} else {
		zap__probe_out_cached(scan.jobs, scan.njobs, scan.timeout_ms);
		for (size_t i = 0; i < scan.njobs; i++) {
			struct zap_prec *r = &scan.recs[scan.job_rec[i]];

			close(scan.jobs[i].fd);
			r->probed_out = true;
			finish_rec(r, &scan.jobs[i].o, NULL);
		}
	}
	free(scan.jobs);
	free(scan.job_rec);
	scan.jobs = NULL;
	scan.job_rec = NULL;
	scan.njobs = 0;
}

/* Turn @r into a failed row: it cannot be loaded into this process. */
static int load_failed(struct zap_prec *r, const struct zap_outcome *o)
{
	char *why = xasprintf("probed OK, but not loaded into this process: %s",
			      o->reason);

	r->desc = NULL;
	r->replaced = r->reason;
	r->reason = why;
	r->state = o->state == ZAP_PLUGIN_LOADED ? ZAP_PLUGIN_ERROR : o->state;
	zap__log(ZAP_LOG_WARN, "loader", "transport '%s' (%s): %s", r->name, r->path,
		 why);
	return zap__fail(ZAP_ENOTAVAIL, "%s: %s", r->name, why);
}

static int load_now(struct zap_prec *r)
{
	const char *slash = strrchr(r->path, '/');
	char *dir = xasprintf("%.*s", (int)(slash - r->path), r->path);
	const struct zap_plugin *d;
	struct zap_outcome o;
	struct stat st;
	char why[256];
	bool pinned;
	void *h;
	int dfd, fd;

	memset(&o, 0, sizeof(o));
	dfd = zap__open_dir(dir, why, sizeof(why));
	free(dir);
	if (dfd < 0) {
		o.state = ZAP_PLUGIN_REFUSED;
		snprintf(o.reason, sizeof(o.reason), "its directory: %.200s", why);
		return load_failed(r, &o);
	}
	fd = zap__open_plugin(dfd, slash + 1, &st, &o);
	close(dfd);
	if (fd < 0)
		return load_failed(r, &o);
	if (!same_file(r, &st)) {
		close(fd);
		o.state = ZAP_PLUGIN_ERROR;
		snprintf(o.reason, sizeof(o.reason),
			 "the file changed since it was probed");
		return load_failed(r, &o);
	}
	d = zap__dlopen_plugin(&fd, r->path, r->name, &h, &pinned, &o);
	if (!pinned)
		close(fd);
	if (!d)
		return load_failed(r, &o);
	zap__log(ZAP_LOG_DEBUG, "loader", "%s: loaded into this process", r->path);
	r->desc = d;
	return 0;
}

int zap__load(const struct zap_prec *cr)
{
	struct zap_prec *r = (struct zap_prec *)cr; /* a row of scan.recs */
	int rc = 0;

	if (cr->desc)
		return 0;
	pthread_mutex_lock(&scan.lock);
	if (r->desc)
		rc = 0;
	else if (r->state != ZAP_PLUGIN_LOADED || !r->probed_out)
		rc = zap__fail(ZAP_ENOTAVAIL, "%s: %s%s%s", r->name,
			       zap_plugin_state_name(r->state), r->reason[0] ? ": " : "",
			       r->reason);
	else
		rc = load_now(r);
	pthread_mutex_unlock(&scan.lock);
	return rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void scan_dir(const char *dir, const char *source)
{
	struct dirrec *dr;
	char **files = NULL;
	size_t nfiles = 0;
	struct dirent *e;
	char why[256];
	DIR *dp;
	int dfd;

	for (size_t i = 0; i < scan.ndirs; i++)
		if (!strcmp(scan.dirs[i].path, dir))
			return; /* listed twice: the first visit covered it */
	scan.dirs = xreallocarray(scan.dirs, scan.ndirs + 1, sizeof(*scan.dirs));
	dr = &scan.dirs[scan.ndirs++];
	dr->path = xstrdup(dir);
	dr->source = source;

	dfd = zap__open_dir(dir, why, sizeof(why));
	if (dfd < 0) {
		if (errno == ENOENT) {
			dr->status = xstrdup("missing");
			zap__log(ZAP_LOG_DEBUG, "loader", "%s: missing", dir);
		} else {
			dr->status = xasprintf("refused: %s", why);
			zap__log(ZAP_LOG_WARN, "loader", "plugin directory %s: %s", dir,
				 dr->status);
		}
		return;
	}
	dp = fdopendir(dfd);
	if (!dp) {
		dr->status = xasprintf("refused: %s", strerror(errno));
		close(dfd);
		return;
	}
	dr->status = xstrdup("ok");
	while ((e = readdir(dp))) {
		char name[ZAP_NAME_MAX];

		if (!candidate_name(e->d_name, name)) {
			if (!strncmp(e->d_name, "libzap-", 7))
				zap__log(ZAP_LOG_DEBUG, "loader",
					 "%s/%s: ignored (not libzap-[a-z0-9_]+.so)", dir,
					 e->d_name);
			continue;
		}
		files = xreallocarray(files, nfiles + 1, sizeof(*files));
		files[nfiles++] = xstrdup(e->d_name);
	}
	/* Sorted, so that the report and tie-breaks are reproducible. */
	if (nfiles) /* qsort(NULL, 0, ...) is undefined */
		qsort(files, nfiles, sizeof(*files), cmp_str);
	for (size_t i = 0; i < nfiles; i++) {
		char name[ZAP_NAME_MAX];

		candidate_name(files[i], name);
		scan_file(dirfd(dp), dir, files[i], name);
		free(files[i]);
	}
	free(files);
	closedir(dp);
}

static int cmp_rank(const void *a, const void *b)
{
	const struct zap_prec *x = find_rec(*(const char *const *)a);
	const struct zap_prec *y = find_rec(*(const char *const *)b);

	return (y->rank > x->rank) - (y->rank < x->rank);
}

static void run_scan(void)
{
	const char *env = zap__config_path("ZAP_PLUGIN_PATH");
	/* In place of the compiled-in directory (empty: none), so that a
	 * build tree's tests never see the plugins installed on the host.
	 * Declared in the registry (core/config-vars.c, ignored under
	 * AT_SECURE); read here because set-but-empty means something. */
	const char *sysdir = zap__env_secure() ? NULL : getenv("ZAP_PLUGIN_DIR");
	struct zap_prec *r;
	struct zap_outcome o;

	/* The built-in default, checked like any plugin. */
	memset(&o, 0, sizeof(o));
	r = add_rec("default", "(built-in)");
	r->builtin = true;
	o.state = zap__validate(&zap_builtin_default, sizeof(zap_builtin_default),
				"default", o.reason, sizeof(o.reason));
	if (o.state == ZAP_PLUGIN_LOADED) {
		o.rank = zap_builtin_default.rank;
		snprintf(o.version, sizeof(o.version), "%s", zap_builtin_default.version);
		zap__run_probe(&zap_builtin_default, &o);
	}
	finish_rec(r, &o, o.state <= ZAP_PLUGIN_ERROR ? &zap_builtin_default : NULL);

	if (scan.program_path) {
		char *save = NULL;

		for (char *d = strtok_r(scan.program_path, ":", &save); d;
		     d = strtok_r(NULL, ":", &save))
			scan_dir(d, "program");
	}
	if (env) {
		char *copy = xstrdup(env), *save = NULL;

		for (char *d = strtok_r(copy, ":", &save); d;
		     d = strtok_r(NULL, ":", &save))
			scan_dir(d, "ZAP_PLUGIN_PATH");
		free(copy);
	}
	if (!sysdir)
		scan_dir(ZAP_PLUGINDIR, "built-in");
	else if (*sysdir)
		scan_dir(sysdir, "ZAP_PLUGIN_DIR");
	probe_queued();

	/* Registered: every valid plugin, best rank first; ties keep report
	 * order (the sort below is stable). */
	scan.registered = xreallocarray(NULL, scan.n + 1, sizeof(*scan.registered));
	for (size_t i = 0; i < scan.n; i++) {
		const struct zap_prec *p = &scan.recs[i];

		if (p->state <= ZAP_PLUGIN_ERROR)
			scan.registered[scan.nregistered++] = p->name;
	}
	for (int i = 1; i < scan.nregistered; i++) /* insertion sort: stable */
		for (int j = i;
		     j > 0 && cmp_rank(&scan.registered[j - 1], &scan.registered[j]) > 0;
		     j--) {
			const char *t = scan.registered[j];

			scan.registered[j] = scan.registered[j - 1];
			scan.registered[j - 1] = t;
		}
	scan.registered[scan.nregistered] = NULL;
	scan.done = true;
}

/* ZAP_PROBE_TIMEOUT_MS, else 5 s: a cold GPU driver may need longer. */
static unsigned default_probe_timeout(void)
{
	uint64_t ms = zap__config()->probe_timeout_ms;

	return ms ? (unsigned)ms : DEFAULT_PROBE_TIMEOUT_MS;
}

ZAP_EXPORT int zap_scan(const struct zap_scan_attr *attr)
{
	int rc = 0;

	zap__clear_error();
	if (attr &&
	    (attr->size < offsetof(struct zap_scan_attr, flags) + sizeof(unsigned) ||
	     (attr->flags & ~(ZAP_SCAN_ISOLATE | ZAP_SCAN_INPROCESS)) ||
	     (attr->flags & ZAP_SCAN_ISOLATE && attr->flags & ZAP_SCAN_INPROCESS)))
		return zap__fail(-EINVAL, "zap_scan: bad attributes");
	pthread_mutex_lock(&scan.lock);
	if (scan.done) {
		rc = zap__fail(-EALREADY, "plugins were already scanned in this process");
	} else {
		scan.inprocess = zap__config()->probe_inprocess;
		if (attr && (attr->flags & ZAP_SCAN_ISOLATE))
			scan.inprocess = false;
		if (attr && (attr->flags & ZAP_SCAN_INPROCESS))
			scan.inprocess = true;
		scan.timeout_ms = default_probe_timeout();
		if (attr &&
		    attr->size >= offsetof(struct zap_scan_attr, probe_timeout_ms) +
					  sizeof(unsigned) &&
		    attr->probe_timeout_ms)
			scan.timeout_ms = attr->probe_timeout_ms;
		if (attr &&
		    attr->size >= offsetof(struct zap_scan_attr, plugin_path) +
					  sizeof(attr->plugin_path) &&
		    attr->plugin_path)
			scan.program_path = xstrdup(attr->plugin_path);
		run_scan();
	}
	pthread_mutex_unlock(&scan.lock);
	return rc;
}

int zap__plugins(const struct zap_prec **recs, size_t *n)
{
	pthread_mutex_lock(&scan.lock);
	if (!scan.done) {
		scan.inprocess = zap__config()->probe_inprocess;
		scan.timeout_ms = default_probe_timeout();
		run_scan();
	}
	pthread_mutex_unlock(&scan.lock);
	*recs = scan.recs;
	*n = scan.n;
	return 0;
}

const struct zap_prec *zap__find(const char *name)
{
	const struct zap_prec *recs;
	size_t n;

	zap__plugins(&recs, &n);
	return find_rec(name);
}

ZAP_EXPORT int zap_registered(const char *const **names)
{
	const struct zap_prec *recs;
	size_t n;

	if (!names)
		return zap__fail(-EINVAL, "zap_registered: NULL names");
	zap__plugins(&recs, &n);
	*names = scan.registered;
	return scan.nregistered;
}

ZAP_EXPORT int zap_report_count(void)
{
	const struct zap_prec *recs;
	size_t n;

	zap__plugins(&recs, &n);
	return (int)n;
}

int zap__copy_sized(void *dst, const void *full, size_t full_size)
{
	size_t want;

	if (!dst)
		return -EINVAL;
	memcpy(&want, dst, sizeof(want));
	if (want < sizeof(size_t))
		return zap__fail(-EINVAL, "struct size %zu too small", want);
	if (want > full_size)
		want = full_size;
	memcpy((char *)dst + sizeof(size_t), (const char *)full + sizeof(size_t),
	       want - sizeof(size_t));
	return 0;
}

ZAP_EXPORT int zap_report_get(size_t index, struct zap_report_entry *e)
{
	const struct zap_prec *recs;
	struct zap_report_entry full;
	size_t n;

	zap__plugins(&recs, &n);
	if (index >= n)
		return -ERANGE;
	memset(&full, 0, sizeof(full));
	full.size = sizeof(full);
	full.name = recs[index].name;
	full.path = recs[index].path;
	full.state = recs[index].state;
	full.reason = recs[index].reason;
	full.detail = recs[index].detail;
	full.version = recs[index].version;
	full.rank = recs[index].rank;
	full.builtin = recs[index].builtin;
	full.caps = recs[index].caps;
	return zap__copy_sized(e, &full, sizeof(full));
}

ZAP_EXPORT int zap_report_dir_count(void)
{
	const struct zap_prec *recs;
	size_t n;

	zap__plugins(&recs, &n);
	return (int)scan.ndirs;
}

ZAP_EXPORT int zap_report_dir_get(size_t index, struct zap_dir_entry *d)
{
	struct zap_dir_entry full;

	if (index >= (size_t)zap_report_dir_count())
		return -ERANGE;
	full.size = sizeof(full);
	full.path = scan.dirs[index].path;
	full.source = scan.dirs[index].source;
	full.status = scan.dirs[index].status;
	return zap__copy_sized(d, &full, sizeof(full));
}
