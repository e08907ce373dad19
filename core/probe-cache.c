/* SPDX-License-Identifier: MIT */
/*
 * Probe results kept between processes (docs/loader.md, "The probe
 * cache"). Probing out of process costs a process start, and on some hosts
 * that is most of a first pick; so an answer a helper gave ("loaded", "not
 * present") is kept for PC_TTL_S seconds, and a later scan whose key
 * matches takes it instead of starting the helper. Nothing that ran plugin
 * code in this process is skipped: the application still loads only the
 * plugin a pick chooses, after checking that its file is the one the key
 * names (loader.c).
 *
 * The key is everything a probe's answer can depend on that a process can
 * see cheaply, hashed (SHA-256):
 *  - this libzap (version, outcome layout, helper protocol), the helper's
 *    file identity, the effective uid and gid, and the boot (boot_id);
 *  - the plugin: its name, path and the identity of the file that was
 *    checked (device, inode, size, modification and change times);
 *  - the whole environment, sorted (but "_"): driver libraries read
 *    variables libzap cannot list (CUDA_VISIBLE_DEVICES, ...), so any
 *    change is a miss;
 *  - /etc/ld.so.cache (ldconfig runs when a driver library is installed)
 *    and /dev (a device node created or removed changes its times).
 * What the key cannot see (a kernel module loaded, hugepages reserved, a
 * file a driver reads) is bounded by the age limit: PC_TTL_S.
 *
 * Only outcomes of a probe that answered are kept: a crash, a hang, a
 * helper failure or an error is probed again by the next scan, so it is
 * reported afresh. Log lines the probe wrote are not replayed.
 *
 * Where: $ZAP_PROBE_CACHE (a directory), else $XDG_RUNTIME_DIR/libzap (a
 * per-user tmpfs, emptied at logout and boot), else nowhere; "off" turns
 * it off; never in a setuid or file-capability program. The directory must
 * belong to the effective user with no access for anyone else, and the
 * file too, or nothing is read or written: whoever can write there runs as
 * this user already. The file is read as untrusted all the same (exact
 * size, known states only, strings terminated) and replaced by rename(),
 * so a reader never sees half of one.
 *
 * State: none between calls; runs under the scan lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "config.h"
#include "probe-wire.h"
#include "zap-private.h"

extern char **environ;

#define PC_TTL_S 60
#define PC_MAX 32
#define PC_FILE "probe-cache"
static const char pc_magic[8] = { 'Z', 'A', 'P', 'P', 'C', 0, 0, 1 };

struct pc_rec {
	unsigned char key[32];
	uint64_t when; /* CLOCK_BOOTTIME seconds (the boot is in the key) */
	struct zap_outcome o;
};

struct pc_head {
	char magic[8];
	uint32_t n;
	uint32_t rec_size;
};

struct pc_file {
	struct pc_head h;
	struct pc_rec rec[PC_MAX];
};

static uint64_t boot_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec;
}

/* Whether @st (the cache directory or file) is the effective user's and
 * no one else's. */
static bool private_to_us(const struct stat *st)
{
	return st->st_uid == geteuid() && !(st->st_mode & 077);
}

/* The directory @path (created 0700 in @parent_fd when missing), if it is
 * private to us; else -1. */
static int open_private_dir(int parent_fd, const char *path)
{
	struct stat st;
	int fd = openat(parent_fd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT && mkdirat(parent_fd, path, 0700) == 0)
		fd = openat(parent_fd, path,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || !private_to_us(&st)) {
		zap__log(ZAP_LOG_DEBUG, "core",
			 "probe cache %s not used: not private to this user", path);
		close(fd);
		return -1;
	}
	return fd;
}

/* The cache directory, or -1 (off, or no safe place). */
static int cache_dir(void)
{
	const char *set = zap__config_path("ZAP_PROBE_CACHE");
	const char *run;
	int base, fd;

	/* In a privileged program the registry answers NULL for
	 * ZAP_PROBE_CACHE and secure_getenv() for XDG_RUNTIME_DIR. */
	if (zap__env_secure())
		return -1;
	if (set && *set)
		return strcmp(set, "off") ? open_private_dir(AT_FDCWD, set) : -1;
	/* The per-user runtime directory (XDG Base Directory): not a ZAP_*
	 * variable, so not in the registry. */
	run = secure_getenv("XDG_RUNTIME_DIR");
	if (!run || run[0] != '/')
		return -1;
	base = open_private_dir(AT_FDCWD, run);
	if (base < 0)
		return -1;
	fd = open_private_dir(base, "libzap");
	close(base);
	return fd;
}

static void put(EVP_MD_CTX *h, const void *p, size_t n)
{
	EVP_DigestUpdate(h, p, n);
}

static void put_str(EVP_MD_CTX *h, const char *s)
{
	put(h, s ? s : "", strlen(s ? s : "") + 1);
}

/* A file's identity; zeros for a file that is not there (also hashed:
 * its coming is then a change). */
static void put_stat(EVP_MD_CTX *h, const struct stat *st)
{
	uint64_t v[7] = { 0 };

	if (st) {
		v[0] = (uint64_t)st->st_dev;
		v[1] = (uint64_t)st->st_ino;
		v[2] = (uint64_t)st->st_size;
		v[3] = (uint64_t)st->st_mtim.tv_sec;
		v[4] = (uint64_t)st->st_mtim.tv_nsec;
		v[5] = (uint64_t)st->st_ctim.tv_sec;
		v[6] = (uint64_t)st->st_ctim.tv_nsec;
	}
	put(h, v, sizeof(v));
}

static void put_path_stat(EVP_MD_CTX *h, const char *path)
{
	struct stat st;

	put_str(h, path);
	put_stat(h, stat(path, &st) ? NULL : &st);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The part of the key every plugin of this scan shares, in @out. 0, or -1
 * (no boot id, no memory: no cache). */
static int context_key(unsigned char out[32])
{
	unsigned char boot[64] = { 0 };
	uint32_t ids[2] = { (uint32_t)geteuid(), (uint32_t)getegid() };
	uint32_t layout[2] = { (uint32_t)sizeof(struct zap_outcome), ZAP_PROBE_PROTO };
	const char **env;
	size_t n = 0;
	EVP_MD_CTX *h;
	int fd, rc = -1;

	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t got = read(fd, boot, sizeof(boot) - 1);
	close(fd);
	if (got < 16)
		return -1;
	while (environ && environ[n])
		n++;
	env = malloc((n ? n : 1) * sizeof(*env));
	h = EVP_MD_CTX_new();
	if (!env || !h || !EVP_DigestInit_ex(h, EVP_sha256(), NULL))
		goto out;
	put_str(h, "libzap probe cache 1");
	put_str(h, ZAP_VERSION);
	put(h, layout, sizeof(layout));
	put(h, ids, sizeof(ids));
	put(h, boot, (size_t)got);
	put_path_stat(h, zap__probe_helper_path());
	put_path_stat(h, "/etc/ld.so.cache");
	put_path_stat(h, "/dev");
	/* "_", which shells set to the program they start, tells programs
	 * apart, not probes: zap-info and the application share answers. */
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "_=", 2))
			env[k++] = environ[i];
	n = k;
	qsort(env, n, sizeof(*env), cmp_str);
	for (size_t i = 0; i < n; i++)
		put_str(h, env[i]);
	rc = EVP_DigestFinal_ex(h, out, NULL) ? 0 : -1;
out:
	EVP_MD_CTX_free(h);
	free(env);
	return rc;
}

/* @j's own key, from the scan's @ctx and the file that was checked. */
static int job_key(const unsigned char ctx[32], const struct zap_probe_job *j,
		   unsigned char out[32])
{
	EVP_MD_CTX *h = EVP_MD_CTX_new();
	struct stat st;
	int rc = -1;

	if (h && !fstat(j->fd, &st) && EVP_DigestInit_ex(h, EVP_sha256(), NULL)) {
		put(h, ctx, 32);
		put_str(h, j->name);
		put_str(h, j->path);
		put_stat(h, &st);
		rc = EVP_DigestFinal_ex(h, out, NULL) ? 0 : -1;
	}
	EVP_MD_CTX_free(h);
	return rc;
}

static bool terminated(const char *s, size_t len)
{
	return memchr(s, '\0', len) != NULL;
}

/* Whether @r, read from the file, is a record this code could have
 * written and still fresh at @now. */
static bool rec_ok(const struct pc_rec *r, uint64_t now)
{
	const struct zap_outcome *o = &r->o;

	return r->when <= now && now - r->when <= PC_TTL_S &&
	       (o->state == ZAP_PLUGIN_LOADED || o->state == ZAP_PLUGIN_NOT_PRESENT) &&
	       terminated(o->version, sizeof(o->version)) &&
	       terminated(o->reason, sizeof(o->reason)) &&
	       terminated(o->detail, sizeof(o->detail)) &&
	       o->caps.size == sizeof(o->caps);
}

/* The file's fresh records into @f (f->h.n of them; 0 when there is no
 * usable file). */
static void read_file(int dfd, struct pc_file *f, uint64_t now)
{
	struct pc_file *raw = malloc(sizeof(*raw));
	struct stat st;
	size_t keep = 0;
	int fd;

	f->h.n = 0;
	if (!raw)
		return;
	fd = openat(dfd, PC_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		goto out;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || !private_to_us(&st) ||
	    st.st_size < (off_t)sizeof(raw->h) || st.st_size > (off_t)sizeof(*raw) ||
	    read(fd, raw, (size_t)st.st_size) != (ssize_t)st.st_size)
		goto out_fd;
	if (memcmp(raw->h.magic, pc_magic, sizeof(pc_magic)) ||
	    raw->h.rec_size != sizeof(struct pc_rec) || raw->h.n > PC_MAX ||
	    (size_t)st.st_size != sizeof(raw->h) + raw->h.n * sizeof(struct pc_rec))
		goto out_fd;
	for (uint32_t i = 0; i < raw->h.n; i++)
		if (rec_ok(&raw->rec[i], now))
			f->rec[keep++] = raw->rec[i];
	f->h.n = (uint32_t)keep;
out_fd:
	close(fd);
out:
	free(raw);
}

/* Replace the file with @f's records (best effort: a cache that cannot be
 * written only costs the next scan a probe). */
static void write_file(int dfd, struct pc_file *f)
{
	char tmp[64];
	size_t len = sizeof(f->h) + f->h.n * sizeof(struct pc_rec);
	int fd;

	memcpy(f->h.magic, pc_magic, sizeof(pc_magic));
	f->h.rec_size = sizeof(struct pc_rec);
	snprintf(tmp, sizeof(tmp), PC_FILE ".%ld.tmp", (long)getpid());
	unlinkat(dfd, tmp, 0);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	bool ok = write(fd, f, len) == (ssize_t)len;
	close(fd);
	if (!ok || renameat(dfd, tmp, dfd, PC_FILE))
		unlinkat(dfd, tmp, 0);
}

/* Say in @o's detail where its answer came from. */
static void note_cached(struct zap_outcome *o, uint64_t age)
{
	size_t used = strlen(o->detail);

	snprintf(o->detail + used, sizeof(o->detail) - used,
		 "%sprobe result from the cache, %llu s old (ZAP_PROBE_CACHE=off probes "
		 "afresh)",
		 used ? "\n" : "", (unsigned long long)age);
}

void zap__probe_out_cached(struct zap_probe_job *pj, size_t n, unsigned timeout_ms)
{
	unsigned char ctx[32], (*keys)[32] = NULL;
	struct zap_probe_job *miss = NULL;
	struct pc_file *f = NULL;
	size_t *idx = NULL, m = 0;
	uint64_t now = boot_s();
	int dfd = n ? cache_dir() : -1;

	if (dfd < 0 || context_key(ctx))
		goto uncached;
	keys = calloc(n, sizeof(*keys));
	miss = calloc(n, sizeof(*miss));
	idx = calloc(n, sizeof(*idx));
	f = malloc(sizeof(*f));
	if (!keys || !miss || !idx || !f)
		goto uncached;
	read_file(dfd, f, now);
	for (size_t i = 0; i < n; i++) {
		const struct pc_rec *hit = NULL;

		if (job_key(ctx, &pj[i], keys[i]))
			goto uncached;
		for (uint32_t k = 0; k < f->h.n && !hit; k++)
			if (!memcmp(f->rec[k].key, keys[i], 32))
				hit = &f->rec[k];
		if (hit) {
			pj[i].o = hit->o;
			note_cached(&pj[i].o, now - hit->when);
			continue;
		}
		idx[m] = i;
		miss[m++] = pj[i];
	}
	if (!m)
		goto done;
	zap__probe_out(miss, m, timeout_ms);
	for (size_t k = 0; k < m; k++) {
		const struct zap_outcome *o = &miss[k].o;
		struct pc_rec *slot;

		pj[idx[k]].o = *o;
		if (o->state != ZAP_PLUGIN_LOADED && o->state != ZAP_PLUGIN_NOT_PRESENT)
			continue;
		/* The newest PC_MAX records: drop the oldest when full. */
		if (f->h.n < PC_MAX) {
			slot = &f->rec[f->h.n++];
		} else {
			slot = &f->rec[0];
			for (uint32_t r = 1; r < f->h.n; r++)
				if (f->rec[r].when < slot->when)
					slot = &f->rec[r];
		}
		memcpy(slot->key, keys[idx[k]], 32);
		slot->when = now;
		slot->o = *o;
	}
	write_file(dfd, f);
	goto done;
uncached:
	zap__probe_out(pj, n, timeout_ms);
done:
	if (dfd >= 0)
		close(dfd);
	free(keys);
	free(miss);
	free(idx);
	free(f);
}
