/* SPDX-License-Identifier: MIT */
/*
 * The plugin host (DESIGN.md section 3): scan the plugin directories once,
 * check every candidate before any of its code runs, probe the valid ones,
 * and keep a load report with one row per candidate.
 *
 * Safety rules, in the order they apply:
 *  - a directory that is world-writable or owned by someone other than root
 *    or the effective user is refused whole;
 *  - only regular files named libzap-<name>.so, <name> in [a-z0-9_]+, are
 *    candidates; the first directory that holds a name wins, later copies
 *    are reported as shadowed (the built-in default holds "default");
 *  - a candidate is opened with O_NOFOLLOW (symbolic links are refused,
 *    never followed), checked with fstat() on that descriptor (regular,
 *    not world-writable, owned by root or the effective user), and that
 *    same open file is handed to dlopen() through /proc/self/fd, so the
 *    file checked is the file loaded;
 *  - the descriptor is plain data up to its ops pointer; it is checked
 *    (symbol size, ABI major, struct sizes, name, mandatory ops) before the
 *    first call into the plugin, which is its probe.
 */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
	bool isolate;
	unsigned timeout_ms;
	struct zap_prec *recs;
	size_t n;
	struct dirrec *dirs;
	size_t ndirs;
	const char **registered;
	int nregistered;
} scan = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* What loading and probing one candidate found: plain data, so that an
 * isolated child can send it to its parent through a pipe. */
struct outcome {
	int state;
	int rank;
	char version[ZAP_VERSION_MAX];
	char reason[256];
	char detail[1024];
	struct zap_caps caps;
};

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

/* Why a file or directory may not be trusted, or NULL. */
static const char *unsafe_owner_or_mode(const struct stat *st, char *buf,
					size_t len, const char *what)
{
	if (st->st_mode & S_IWOTH) {
		snprintf(buf, len, "world-writable %s", what);
		return buf;
	}
	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		snprintf(buf, len, "%s owned by uid %u (only root or uid %u are trusted)",
			 what, (unsigned)st->st_uid, (unsigned)geteuid());
		return buf;
	}
	return NULL;
}

#define OP_CHECK(field) { #field, offsetof(struct zap_plugin_ops, field) }

enum zap_plugin_state zap__validate(const struct zap_plugin *d, size_t symsize,
				    const char *expect_name, char *why, size_t len)
{
	static const struct {
		const char *name;
		size_t off;
	} mandatory[] = {
		OP_CHECK(probe), OP_CHECK(open), OP_CHECK(shutdown),
		OP_CHECK(destroy), OP_CHECK(send), OP_CHECK(recv), OP_CHECK(caps),
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
		snprintf(why, len, "ops table too short (%zu bytes, need %zu)",
			 ops->size, (size_t)ZAP_PLUGIN_OPS_MIN_SIZE);
		return ZAP_PLUGIN_INVALID;
	}
	for (size_t i = 0; i < ZAP_ARRAY_SIZE(mandatory); i++) {
		void *fn;

		memcpy(&fn, (const char *)ops + mandatory[i].off, sizeof(fn));
		if (!fn) {
			snprintf(why, len, "mandatory op '%s' missing", mandatory[i].name);
			return ZAP_PLUGIN_INVALID;
		}
	}
	return ZAP_PLUGIN_LOADED;
}

static void run_probe(const struct zap_plugin *d, struct outcome *o)
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
		snprintf(o->reason, sizeof(o->reason), "probe returned %d, not a zap_probe_result",
			 (int)r);
	}
}

/*
 * dlopen the open file @fd, check its descriptor, probe it. Returns the
 * descriptor when the plugin is valid (whatever its probe said), keeping
 * it loaded; NULL otherwise, with @o saying why.
 */
static const struct zap_plugin *load_candidate(int fd, const char *path,
					       const char *name, struct outcome *o)
{
	char fdpath[64];
	const struct zap_plugin *d;
	const ElfW(Sym) *sym = NULL;
	Dl_info info;
	void *h;

	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	h = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		size_t n = strlen(fdpath);

		o->state = ZAP_PLUGIN_DLOPEN_FAILED;
		/* Name the real file, not the descriptor path. */
		if (e && !strncmp(e, fdpath, n))
			snprintf(o->reason, sizeof(o->reason), "%s%s", path, e + n);
		else
			snprintf(o->reason, sizeof(o->reason), "%s", e ? e : "unknown error");
		return NULL;
	}
	d = dlsym(h, ZAP_PLUGIN_SYMBOL);
	if (!d) {
		char other[32];

		o->state = ZAP_PLUGIN_NO_SYMBOL;
		snprintf(o->reason, sizeof(o->reason), "no symbol %s", ZAP_PLUGIN_SYMBOL);
		/* A plugin for another ABI names its descriptor differently. */
		for (unsigned v = 0; v < 10; v++) {
			if (v == ZAP_PLUGIN_ABI_MAJOR)
				continue;
			snprintf(other, sizeof(other), "zap_plugin_v%u", v);
			if (dlsym(h, other)) {
				o->state = ZAP_PLUGIN_ABI_MISMATCH;
				snprintf(o->reason, sizeof(o->reason),
					 "exports %s: ABI major %u (host supports %u)",
					 other, v, ZAP_PLUGIN_ABI_MAJOR);
				break;
			}
		}
		goto reject;
	}
	if (!dladdr1(d, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
	    ELF64_ST_TYPE(sym->st_info) != STT_OBJECT) {
		o->state = ZAP_PLUGIN_INVALID;
		snprintf(o->reason, sizeof(o->reason), "%s is not a data object",
			 ZAP_PLUGIN_SYMBOL);
		goto reject;
	}
	o->state = zap__validate(d, sym->st_size, name, o->reason, sizeof(o->reason));
	if (o->state != ZAP_PLUGIN_LOADED)
		goto reject;
	o->rank = d->rank;
	snprintf(o->version, sizeof(o->version), "%s", d->version);
	run_probe(d, o);
	return d;
reject:
	dlclose(h);
	return NULL;
}

static void write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		p += n;
		len -= (size_t)n;
	}
}

/*
 * Load and probe in a child so that a crash or a hang is reported, not
 * fatal. The child sends its struct outcome through a pipe.
 */
static void load_isolated(int fd, const char *path, const char *name,
			  struct outcome *o)
{
	uint64_t deadline = zap__now_ns() + (uint64_t)scan.timeout_ms * 1000000ull;
	size_t got = 0;
	int p[2], status;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC)) {
		o->state = ZAP_PLUGIN_ERROR;
		snprintf(o->reason, sizeof(o->reason), "isolated probe: pipe: %s",
			 strerror(errno));
		return;
	}
	pid = fork();
	if (pid < 0) {
		o->state = ZAP_PLUGIN_ERROR;
		snprintf(o->reason, sizeof(o->reason), "isolated probe: fork: %s",
			 strerror(errno));
		close(p[0]);
		close(p[1]);
		return;
	}
	if (pid == 0) {
		/* The caller's crash handlers (a test runner's, a crash
		 * reporter's) must not catch the plugin's crash and carry on
		 * in this child: die of it, so the parent can name the signal. */
		static const int crash[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE,
					     SIGABRT, SIGSYS, SIGTRAP };

		for (size_t i = 0; i < ZAP_ARRAY_SIZE(crash); i++)
			signal(crash[i], SIG_DFL);
		close(p[0]);
		load_candidate(fd, path, name, o);
		write_all(p[1], o, sizeof(*o));
		_exit(0);
	}
	close(p[1]);
	for (;;) {
		uint64_t now = zap__now_ns();
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		int ms = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
		ssize_t n;

		if (poll(&pfd, 1, ms) == 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			close(p[0]);
			memset(o, 0, sizeof(*o));
			o->state = ZAP_PLUGIN_ERROR;
			snprintf(o->reason, sizeof(o->reason),
				 "probe timed out after %u ms (killed)", scan.timeout_ms);
			return;
		}
		n = read(p[0], (char *)o + got, sizeof(*o) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == sizeof(*o))
			break;
	}
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);

		memset(o, 0, sizeof(*o));
		o->state = ZAP_PLUGIN_ERROR;
		snprintf(o->reason, sizeof(o->reason), "probe crashed: signal %d (%s)",
			 sig, strsignal(sig));
	} else if (got != sizeof(*o)) {
		memset(o, 0, sizeof(*o));
		o->state = ZAP_PLUGIN_ERROR;
		snprintf(o->reason, sizeof(o->reason),
			 "isolated probe exited with status %d before reporting",
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	}
	o->reason[sizeof(o->reason) - 1] = '\0';
	o->detail[sizeof(o->detail) - 1] = '\0';
	o->version[sizeof(o->version) - 1] = '\0';
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

static void finish_rec(struct zap_prec *r, const struct outcome *o,
		       const struct zap_plugin *d)
{
	r->state = (enum zap_plugin_state)o->state;
	r->rank = o->rank;
	r->reason = xstrdup(o->reason);
	r->detail = xstrdup(o->detail);
	r->version = xstrdup(o->version);
	if (r->state == ZAP_PLUGIN_LOADED)
		r->caps = o->caps;
	r->desc = d;

	switch (r->state) {
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

static void scan_file(int dfd, const char *dir, const char *file, const char *name)
{
	char *path = xasprintf("%s/%s", dir, file);
	const struct zap_plugin *d = NULL;
	const struct zap_prec *first = find_rec(name);
	/* add_rec() may move the records: keep the string, not the record. */
	const char *first_path = first ? first->path : NULL;
	struct zap_prec *r = add_rec(name, path);
	struct outcome o;
	char why[160];
	const char *bad;
	struct stat st;
	int fd;

	memset(&o, 0, sizeof(o));
	free(path);
	if (first_path) {
		o.state = ZAP_PLUGIN_SHADOWED;
		snprintf(o.reason, sizeof(o.reason), "shadowed by %s", first_path);
		goto out;
	}
	/* O_NONBLOCK: a FIFO posing as a plugin must not hang the scan. */
	fd = openat(dfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		o.state = ZAP_PLUGIN_REFUSED;
		if (errno == ELOOP)
			snprintf(o.reason, sizeof(o.reason),
				 "symbolic link (plugins must be regular files)");
		else
			snprintf(o.reason, sizeof(o.reason), "cannot open: %s",
				 strerror(errno));
		goto out;
	}
	if (fstat(fd, &st)) {
		o.state = ZAP_PLUGIN_REFUSED;
		snprintf(o.reason, sizeof(o.reason), "fstat: %s", strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		o.state = ZAP_PLUGIN_REFUSED;
		snprintf(o.reason, sizeof(o.reason), "not a regular file");
	} else if ((bad = unsafe_owner_or_mode(&st, why, sizeof(why), "file"))) {
		o.state = ZAP_PLUGIN_REFUSED;
		snprintf(o.reason, sizeof(o.reason), "%s", bad);
	} else if (scan.isolate) {
		load_isolated(fd, r->path, name, &o);
	} else {
		d = load_candidate(fd, r->path, name, &o);
	}
	/*
	 * A loaded plugin keeps its descriptor open: the dynamic loader knows
	 * it as "/proc/self/fd/N" and would hand the same object back for a
	 * later dlopen of that name if N were reused by the next candidate.
	 */
	if (!d)
		close(fd);
out:
	finish_rec(r, &o, d);
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
	struct stat st;
	char why[160];
	const char *bad = NULL;
	DIR *dp;
	int dfd;

	for (size_t i = 0; i < scan.ndirs; i++)
		if (!strcmp(scan.dirs[i].path, dir))
			return; /* listed twice: the first visit covered it */
	scan.dirs = xreallocarray(scan.dirs, scan.ndirs + 1, sizeof(*scan.dirs));
	dr = &scan.dirs[scan.ndirs++];
	dr->path = xstrdup(dir);
	dr->source = source;

	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		if (errno == ENOENT) {
			dr->status = xstrdup("missing");
			zap__log(ZAP_LOG_DEBUG, "loader", "%s: missing", dir);
		} else {
			dr->status = xasprintf("refused: %s", strerror(errno));
			zap__log(ZAP_LOG_WARN, "loader", "plugin directory %s: %s", dir,
				 dr->status);
		}
		return;
	}
	if (fstat(dfd, &st) ||
	    (bad = unsafe_owner_or_mode(&st, why, sizeof(why), "directory"))) {
		dr->status = xasprintf("refused: %s", bad ? bad : strerror(errno));
		zap__log(ZAP_LOG_WARN, "loader", "plugin directory %s: %s", dir,
			 dr->status);
		close(dfd);
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
					 "%s/%s: ignored (not libzap-[a-z0-9_]+.so)",
					 dir, e->d_name);
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
	const char *env = secure_getenv("ZAP_PLUGIN_PATH");
	struct zap_prec *r;
	struct outcome o;

	/* The built-in default, checked like any plugin. */
	memset(&o, 0, sizeof(o));
	r = add_rec("default", "(built-in)");
	r->builtin = true;
	o.state = zap__validate(&zap_builtin_default, sizeof(zap_builtin_default),
				"default", o.reason, sizeof(o.reason));
	if (o.state == ZAP_PLUGIN_LOADED) {
		o.rank = zap_builtin_default.rank;
		snprintf(o.version, sizeof(o.version), "%s", zap_builtin_default.version);
		run_probe(&zap_builtin_default, &o);
	}
	finish_rec(r, &o, o.state <= ZAP_PLUGIN_ERROR ? &zap_builtin_default : NULL);

	if (env) {
		char *copy = xstrdup(env), *save = NULL;

		for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
			scan_dir(d, "ZAP_PLUGIN_PATH");
		free(copy);
	}
	scan_dir(ZAP_PLUGINDIR, "built-in");

	/* Registered: every valid plugin, best rank first; ties keep report
	 * order (the sort below is stable). */
	scan.registered = xreallocarray(NULL, scan.n + 1, sizeof(*scan.registered));
	for (size_t i = 0; i < scan.n; i++) {
		const struct zap_prec *p = &scan.recs[i];

		if (p->state <= ZAP_PLUGIN_ERROR)
			scan.registered[scan.nregistered++] = p->name;
	}
	for (int i = 1; i < scan.nregistered; i++) /* insertion sort: stable */
		for (int j = i; j > 0 && cmp_rank(&scan.registered[j - 1],
						  &scan.registered[j]) > 0; j--) {
			const char *t = scan.registered[j];

			scan.registered[j] = scan.registered[j - 1];
			scan.registered[j - 1] = t;
		}
	scan.registered[scan.nregistered] = NULL;
	scan.done = true;
}

ZAP_EXPORT int zap_scan(const struct zap_scan_attr *attr)
{
	int rc = 0;

	zap__clear_error();
	if (attr && (attr->size < offsetof(struct zap_scan_attr, flags) + sizeof(unsigned) ||
		     (attr->flags & ~ZAP_SCAN_ISOLATE)))
		return zap__fail(-EINVAL, "zap_scan: bad attributes");
	pthread_mutex_lock(&scan.lock);
	if (scan.done) {
		rc = zap__fail(-EALREADY, "plugins were already scanned in this process");
	} else {
		scan.isolate = attr && (attr->flags & ZAP_SCAN_ISOLATE);
		scan.timeout_ms = DEFAULT_PROBE_TIMEOUT_MS;
		if (attr && attr->size >= offsetof(struct zap_scan_attr, probe_timeout_ms) +
						  sizeof(unsigned) && attr->probe_timeout_ms)
			scan.timeout_ms = attr->probe_timeout_ms;
		run_scan();
	}
	pthread_mutex_unlock(&scan.lock);
	return rc;
}

int zap__plugins(const struct zap_prec **recs, size_t *n)
{
	pthread_mutex_lock(&scan.lock);
	if (!scan.done) {
		scan.timeout_ms = DEFAULT_PROBE_TIMEOUT_MS;
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
