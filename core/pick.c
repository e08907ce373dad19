/* SPDX-License-Identifier: MIT */
/*
 * Choosing a transport (docs/loader.md, "Picking a transport"): parse the preference, turn it
 * into an ordered list of candidates, load (loader.c: only a plugin picked
 * is loaded into this process) and open the first that opens.
 *
 * Shared state: the first-pick flag (atomic) and the warnings already
 * given (warn_once(), under its own mutex); the rest is per call.
 */
#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "zap-private.h"

#define MAX_NAMES ZAP_PREF_MAX_NAMES
_Static_assert(ZAP_PREF_MAX_LEN > 2 + MAX_NAMES * ZAP_NAME_MAX,
	       "the longest canonical preference must parse again");
#define MAX_CANDS 64

struct plan {
	const struct zap_prec *cand[MAX_CANDS];
	size_t n;
	size_t requested;      /* cand[0..requested) were asked for by name */
	bool named;            /* the preference named transports */
	bool all_unknown;      /* ... but none of them is registered */
	char unavailable[512]; /* why the named ones cannot be used */
	char how[128];         /* how the list was made, for the summary */
};

int zap__parse_pref(const char *src, const char *origin, struct zap_pref *p)
{
	char buf[ZAP_PREF_MAX_LEN];
	char *s, *end, *save = NULL;
	size_t len;

	memset(p, 0, sizeof(*p));
	if (strlen(src) >= sizeof(buf))
		return zap__fail(-EINVAL, "%s is too long (%zu characters)", origin,
				 strlen(src));
	for (len = 0; src[len]; len++)
		buf[len] = (char)tolower((unsigned char)src[len]);
	buf[len] = '\0';
	s = buf;
	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	if (*s == '=') {
		p->strict = true;
		s++;
	}
	if (*s == '^') {
		p->exclude = true;
		s++;
	}
	while (isspace((unsigned char)*s))
		s++;
	if (!*s || !strcmp(s, "auto")) {
		if (p->exclude)
			return zap__fail(-EINVAL, "%s='%s': '^' needs transport names",
					 origin, src);
		return 0;
	}
	if (s[strlen(s) - 1] == ',' || *s == ',')
		return zap__fail(-EINVAL, "%s='%s': empty name in list", origin, src);
	for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *e = tok + strlen(tok);

		while (isspace((unsigned char)*tok))
			tok++;
		while (e > tok && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (!*tok)
			return zap__fail(-EINVAL, "%s='%s': empty name in list", origin,
					 src);
		if (!strcmp(tok, "auto"))
			return zap__fail(-EINVAL,
					 "%s='%s': 'auto' cannot be part of a list",
					 origin, src);
		if (strlen(tok) >= ZAP_NAME_MAX)
			return zap__fail(-EINVAL, "%s='%s': name '%s' is too long",
					 origin, src, tok);
		for (const char *c = tok; *c; c++)
			if (!islower((unsigned char)*c) && !isdigit((unsigned char)*c) &&
			    *c != '_')
				return zap__fail(
					-EINVAL,
					"%s='%s': '%s' is not a transport name ([a-z0-9_]+)",
					origin, src, tok);
		if (p->n == MAX_NAMES)
			return zap__fail(-EINVAL, "%s='%s': more than %d names", origin,
					 src, MAX_NAMES);
		/* The documented alias: "tcp" is what people call default. */
		if (!strcmp(tok, "tcp"))
			tok = "default";
		snprintf(p->names[p->n++], ZAP_NAME_MAX, "%s", tok);
	}
	return 0;
}

/*
 * WARN @msg once per process: the preference comes from ZAP_TRANSPORT, read
 * once, or from a program that asks the same on every connection; the same
 * warning on every pick would drown the log. Remembered by a hash of the
 * text, for the first few distinct texts.
 */
static void warn_once(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn_once(const char *fmt, ...)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static uint64_t seen[64];
	static size_t nseen;
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	bool said = false;
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	for (const char *c = msg; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ull;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nseen && !said; i++)
		said = seen[i] == h;
	if (!said && nseen < ZAP_ARRAY_SIZE(seen))
		seen[nseen++] = h;
	pthread_mutex_unlock(&lock);
	if (!said)
		zap__log(ZAP_LOG_WARN, "pick", "%s", msg);
}

static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[ZAP_NAME_MAX + 1];

	if (lb > ZAP_NAME_MAX)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/*
 * Whether @r can be named in a suggestion: a transport this process can
 * attempt (zap_registered()), never one whose file failed to load (no
 * symbol, ABI mismatch, refused, dlopen failed...) or was shadowed:
 * suggesting it would only lead to a second error.
 */
static bool suggestable(const struct zap_prec *r)
{
	return r->state == ZAP_PLUGIN_LOADED || r->state == ZAP_PLUGIN_NOT_PRESENT ||
	       r->state == ZAP_PLUGIN_ERROR;
}

/*
 * Words people use for what a transport does, so that a suggestion goes by
 * meaning where spelling alone would mislead ("tcp" is close to "uma" in
 * letters). Only names a transport can be suggested for are listed.
 */
static const struct {
	const char *word, *transport;
} synonyms[] = {
	{ "socket", "default" },  { "sockets", "default" }, { "unix", "default" },
	{ "shm", "default" },     { "ip", "default" },      { "rdma", "gpudirect" },
	{ "verbs", "gpudirect" }, { "ib", "gpudirect" },    { "infiniband", "gpudirect" },
	{ "roce", "gpudirect" },  { "cuda", "uma" },        { "managed", "uma" },
	{ "unified", "uma" },     { "bypass", "dpdk" },     { "pmd", "dpdk" },
};

/*
 * The transports this project ships as packages of their own: a name of
 * theirs is known even when the package is not installed, and asking for
 * one is "not available", not "unknown" (so that fallback code behaves the
 * same whether or not the package is there).
 */
static const struct {
	const char *name;
	long rank; /* the shipped plugin's, for falling back below it */
} shipped[] = {
	{ "uma", ZAP_RANK_UMA },
	{ "gpudirect", ZAP_RANK_GPUDIRECT },
	{ "dpdk", ZAP_RANK_DPDK },
};

/* Whether @name is a shipped transport; its rank in *@rank. */
static bool is_shipped(const char *name, long *rank)
{
	for (size_t i = 0; i < ZAP_ARRAY_SIZE(shipped); i++)
		if (!strcmp(shipped[i].name, name)) {
			*rank = shipped[i].rank;
			return true;
		}
	return false;
}

/* "unknown transport 'x' (did you mean 'y'?)" or with the known names. */
static void unknown_text(const char *name, char *buf, size_t len)
{
	const struct zap_prec *recs;
	const char *best = NULL;
	size_t n, bestd = SIZE_MAX, off;

	zap__plugins(&recs, &n);
	for (size_t i = 0; i < ZAP_ARRAY_SIZE(synonyms); i++) {
		const struct zap_prec *r = zap__find(synonyms[i].transport);

		if (!strcmp(name, synonyms[i].word) && r && suggestable(r)) {
			snprintf(buf, len, "unknown transport '%s' (did you mean '%s'?)",
				 name, r->name);
			return;
		}
	}
	for (size_t i = 0; i < n; i++) {
		size_t d;

		if (!suggestable(&recs[i]))
			continue;
		d = edit_distance(name, recs[i].name);
		if (d < bestd) {
			bestd = d;
			best = recs[i].name;
		}
	}
	if (best && bestd <= 3) {
		snprintf(buf, len, "unknown transport '%s' (did you mean '%s'?)", name,
			 best);
		return;
	}
	off = (size_t)snprintf(buf, len, "unknown transport '%s' (known:", name);
	for (size_t i = 0; i < n && off < len; i++)
		if (suggestable(&recs[i]))
			off += (size_t)snprintf(buf + off, len - off, " %s",
						recs[i].name);
	if (off < len)
		snprintf(buf + off, len - off, ")");
}

static bool in_plan(const struct plan *pl, const struct zap_prec *r)
{
	for (size_t i = 0; i < pl->n; i++)
		if (pl->cand[i] == r)
			return true;
	return false;
}

static bool excluded(const struct zap_pref *p, const char *name)
{
	for (size_t i = 0; p->exclude && i < p->n; i++)
		if (!strcmp(p->names[i], name))
			return true;
	return false;
}

/* Append every available transport ranked below @below, best first. */
static void add_by_rank(struct plan *pl, const struct zap_pref *p, long below)
{
	const struct zap_prec *recs;
	size_t n;

	zap__plugins(&recs, &n);
	for (;;) {
		const struct zap_prec *best = NULL;

		for (size_t i = 0; i < n; i++) {
			const struct zap_prec *r = &recs[i];

			if (r->state != ZAP_PLUGIN_LOADED || r->rank >= below ||
			    excluded(p, r->name) || in_plan(pl, r))
				continue;
			if (!best || r->rank > best->rank)
				best = r;
		}
		if (!best || pl->n == MAX_CANDS)
			return;
		pl->cand[pl->n++] = best;
	}
}

/*
 * @reason without a leading "<name>: ", so that text built as
 * "<name>: <state>: <reason>" does not say the name twice (plugins often
 * start their reasons with their own name).
 */
static const char *unprefixed(const char *name, const char *reason)
{
	size_t n = strlen(name);

	if (!strncmp(reason, name, n) && reason[n] == ':' && reason[n + 1] == ' ')
		return reason + n + 2;
	return reason;
}

static void append(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...)
{
	size_t off = strlen(buf);
	va_list ap;

	if (off + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + off, len - off, fmt, ap);
	va_end(ap);
}

/*
 * Names the preference gives that no plugin answers to: a shipped one that
 * is not installed sets the fallback floor (@known, @lowest) as an
 * installed one would; an unknown one is an error when @strict, else a
 * WARN (@warn) and a reason.
 */
static int plan_absent(const struct zap_pref *p, bool strict, bool warn, struct plan *pl,
		       bool *known, long *lowest)
{
	long rank;

	for (size_t i = 0; i < p->n; i++) {
		const struct zap_prec *r = zap__find(p->names[i]);
		char text[256];

		if (r)
			continue;
		if (is_shipped(p->names[i], &rank)) {
			snprintf(text, sizeof(text),
				 "%s: not installed (install libzap-plugin-%s)",
				 p->names[i], p->names[i]);
			if (p->exclude)
				continue; /* excluding what is not there: done */
			/* Known, with the rank it ships with: fall back below
			 * it, as for an installed one that is not present. */
			if (!*known || rank < *lowest)
				*lowest = rank;
			*known = true;
			append(pl->unavailable, sizeof(pl->unavailable), "%s%s",
			       pl->unavailable[0] ? "; " : "", text);
			continue;
		}
		unknown_text(p->names[i], text, sizeof(text));
		if (strict)
			return zap__fail(-EINVAL, "%s", text);
		if (warn)
			warn_once("%s; ignoring it", text);
		if (!p->exclude)
			append(pl->unavailable, sizeof(pl->unavailable), "%s%s",
			       pl->unavailable[0] ? "; " : "", text);
	}
	return 0;
}

/* No names, or only exclusions: every loaded transport, best rank first. */
static int plan_auto(const struct zap_pref *p, struct plan *pl)
{
	add_by_rank(pl, p, (long)INT32_MAX + 1);
	snprintf(pl->how, sizeof(pl->how), "%s",
		 p->exclude ? "auto, with exclusions" : "auto: best-ranked available");
	if (!pl->n)
		return zap__fail(ZAP_ENOTAVAIL, "no transport left after exclusions");
	return 0;
}

/*
 * The named transports that are present, in the preference's order: the
 * loaded ones become the requested candidates, the others a reason each;
 * any with a rank lowers the fallback floor (@known, @lowest).
 */
static void plan_named(const struct zap_pref *p, struct plan *pl, bool *known,
		       long *lowest)
{
	for (size_t i = 0; i < p->n; i++) {
		const struct zap_prec *r = zap__find(p->names[i]);

		if (!r)
			continue;
		/*
		 * Fall back below a transport's rank only when its descriptor
		 * was read: one that is present but could not even be loaded
		 * has no rank (0 is not one), and falls back as an absent one
		 * does.
		 */
		if (r->state <= ZAP_PLUGIN_ERROR) {
			if (!*known || r->rank < *lowest)
				*lowest = r->rank;
			*known = true;
		}
		if (r->state == ZAP_PLUGIN_LOADED) {
			if (!in_plan(pl, r))
				pl->cand[pl->n++] = r;
			continue;
		}
		append(pl->unavailable, sizeof(pl->unavailable), "%s%s: %s%s%s",
		       pl->unavailable[0] ? "; " : "", r->name,
		       zap_plugin_state_name(r->state), r->reason[0] ? ": " : "",
		       unprefixed(r->name, r->reason));
	}
}

/*
 * Fall back below the lowest-ranked transport named (none with a rank:
 * anything goes, as for auto), and to default at the end: it is always
 * there, whatever rank a failing plugin claimed.
 */
static void plan_fallback(const struct zap_pref *p, struct plan *pl, bool known,
			  long lowest)
{
	const struct zap_prec *def;

	add_by_rank(pl, p, known ? lowest : (long)INT32_MAX + 1);
	def = zap__find("default");
	if (def && def->state == ZAP_PLUGIN_LOADED && !in_plan(pl, def) &&
	    pl->n < MAX_CANDS)
		pl->cand[pl->n++] = def;
	if (!known) {
		/* Still a fallback (zap-info must not call it success), but the
		 * unknown-name WARN already said so. */
		pl->all_unknown = true;
		snprintf(pl->how, sizeof(pl->how), "auto: no known transport was named");
	}
}

/*
 * Turn a preference into candidates. @warn: log WARNs for unknown names
 * (a real pick does; zap_pick_explain() does not).
 */
static int make_plan(const struct zap_pref *p, bool strict, bool warn, struct plan *pl)
{
	long lowest = 0;
	bool known = false;
	int rc;

	memset(pl, 0, sizeof(*pl));
	rc = plan_absent(p, strict, warn, pl, &known, &lowest);
	if (rc)
		return rc;
	if (!p->n || p->exclude)
		return plan_auto(p, pl);

	pl->named = true;
	plan_named(p, pl, &known, &lowest);
	pl->requested = pl->n;
	snprintf(pl->how, sizeof(pl->how), "requested%s", strict ? ", strict" : "");
	if (strict) {
		if (!pl->n)
			return zap__fail(ZAP_ENOTAVAIL, "%s", pl->unavailable);
		return 0;
	}
	plan_fallback(p, pl, known, lowest);
	if (!pl->n)
		return zap__fail(ZAP_ENOTAVAIL, "%s", pl->unavailable);
	return 0;
}

static int plan_for(const char *pref, unsigned flags, bool warn, struct plan *pl,
		    bool *strict)
{
	const struct zap_config *cfg = zap__config();
	const char *src = pref ? pref : (cfg->transport ? cfg->transport : "");
	struct zap_pref p;
	int rc;

	if (flags & ~ZAP_PICK_STRICT)
		return zap__fail(-EINVAL, "unknown pick flags 0x%x", flags);
	rc = zap__parse_pref(src, pref ? "preference" : "ZAP_TRANSPORT", &p);
	if (rc)
		return rc;
	*strict = p.strict || (flags & ZAP_PICK_STRICT);
	return make_plan(&p, *strict, warn, pl);
}

/*
 * The first-pick line: "name=state" per transport and the winner, short
 * enough to read on every start. The reasons (driver error strings can be
 * long) go to a DEBUG line, to zap-info and to the load report.
 */
static void probed_text(char *buf, size_t len, bool reasons)
{
	const struct zap_prec *recs;
	size_t n;

	buf[0] = '\0';
	zap__plugins(&recs, &n);
	for (size_t i = 0; i < n; i++) {
		const struct zap_prec *r = &recs[i];

		if (r->state == ZAP_PLUGIN_SHADOWED)
			continue;
		if (!reasons)
			append(buf, len, "%s%s=%s", buf[0] ? ", " : "", r->name,
			       r->state == ZAP_PLUGIN_LOADED
				       ? "ok"
				       : zap_plugin_state_name(r->state));
		else if (r->state != ZAP_PLUGIN_LOADED && r->reason[0])
			append(buf, len, "%s%s: %s", buf[0] ? "; " : "", r->name,
			       unprefixed(r->name, r->reason));
	}
}

static void first_pick_summary(const char *winner, const char *why)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;
	char probed[1536];

	if (atomic_flag_test_and_set(&said))
		return;
	probed_text(probed, sizeof(probed), false);
	zap__log_pick_summary("%s; picked %s (%s)", probed, winner, why);
	if (zap__log_enabled(ZAP_LOG_DEBUG)) {
		probed_text(probed, sizeof(probed), true);
		if (probed[0])
			zap__log(ZAP_LOG_DEBUG, "pick", "probe reasons: %s", probed);
	}
}

static int resolve_attr(const struct zap_attr *attr, struct zap_open_args *args,
			uint64_t *send_timeout_ms)
{
	const struct zap_config *cfg = zap__config();
	size_t sz = attr ? attr->size : 0;

	memset(args, 0, sizeof(*args));
	args->size = sizeof(*args);
	if (attr && sz < sizeof(size_t))
		return zap__fail(-EINVAL, "zap_attr.size is %zu", sz);
#define HAS(f) (attr && sz >= offsetof(struct zap_attr, f) + sizeof(attr->f))
	if (HAS(listen) && attr->listen) {
		if (zap__check_address("listen attribute", attr->listen))
			return -EINVAL;
		args->listen = attr->listen;
	} else {
		args->listen = cfg->listen ? cfg->listen : "0.0.0.0:0";
	}
	if (HAS(max_msg_size) && attr->max_msg_size > ZAP_MAX_MSG_LIMIT)
		return zap__fail(-EINVAL,
				 "zap_attr.max_msg_size %llu is above the limit %llu "
				 "(the same bounds as ZAP_MAX_MSG_BYTES)",
				 (unsigned long long)attr->max_msg_size,
				 (unsigned long long)ZAP_MAX_MSG_LIMIT);
	if (HAS(max_msg_size) && attr->max_msg_size)
		args->max_msg_size = attr->max_msg_size;
	else
		args->max_msg_size = cfg->max_msg_size ? cfg->max_msg_size
						       : ZAP_DEFAULT_MAX_MSG_BYTES;
	if (HAS(pool_bytes))
		args->pool_bytes = attr->pool_bytes;
	*send_timeout_ms = cfg->send_timeout_ms;
	if (HAS(send_timeout_ms) && attr->send_timeout_ms)
		*send_timeout_ms = attr->send_timeout_ms == ZAP_TIMEOUT_NONE
					   ? 0
					   : attr->send_timeout_ms;
	/* TLS: each attribute, else its variable (core/env.c), which an
	 * AT_SECURE program refuses rather than run without it. */
	if (zap__config_tls(cfg, 0, HAS(tls_cert) ? attr->tls_cert : NULL,
			    &args->tls_cert) ||
	    zap__config_tls(cfg, 1, HAS(tls_key) ? attr->tls_key : NULL,
			    &args->tls_key) ||
	    zap__config_tls(cfg, 2, HAS(tls_ca) ? attr->tls_ca : NULL, &args->tls_ca) ||
	    zap__config_tls(cfg, 3, HAS(tls_peers) ? attr->tls_peers : NULL,
			    &args->tls_peers))
		return -EPERM;
#undef HAS
	return 0;
}

/*
 * Open @r with the asynchronous signals blocked in this thread, so that
 * the threads a transport starts (accept and progress threads, DPDK's
 * service thread) inherit a mask that keeps the application's signals on
 * the application's threads. Faults (SIGSEGV...) stay unblocked: blocking
 * them would only turn a crash into a silent kill.
 */
static int open_blocked(const struct zap_prec *r, const struct zap_open_args *args,
			uint64_t send_timeout_ms, struct zap_transport **out)
{
	static const int faults[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE,
				      SIGTRAP, SIGSYS, SIGABRT };
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	for (size_t i = 0; i < ZAP_ARRAY_SIZE(faults); i++)
		sigdelset(&all, faults[i]);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = zap__open(r, args, send_timeout_ms, out);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/*
 * Candidate @i of @pl (@r) opened: say once how it was chosen, warning when
 * it is a fallback from what was asked for or came after open failures.
 */
static void pick_won(const struct plan *pl, size_t i, const struct zap_prec *r)
{
	char why[768];

	if (pl->named && i >= pl->requested) {
		snprintf(why, sizeof(why), "fallback");
		if (!pl->all_unknown)
			warn_once(
				"requested transport not available (%s); falling back to '%s'",
				pl->unavailable, r->name);
	} else if (i > 0) {
		/* Auto, or a list, whose better candidate did not open: say
		 * once why this one won. */
		snprintf(why, sizeof(why), "%s, after open failures", pl->how);
		warn_once("%s; using '%s'", pl->unavailable, r->name);
	} else {
		snprintf(why, sizeof(why), "%s", pl->how);
	}
	first_pick_summary(r->name, why);
}

/*
 * -EINVAL from opening @r is a configuration error (a variable or
 * attribute, a TLS file): the operator's to fix, the same whatever the
 * preference, and never hidden by a fallback, which would read the same
 * settings anyway.
 */
static int pick_config_error(const struct zap_prec *r)
{
	char reason[512];

	snprintf(reason, sizeof(reason), "%s", zap_last_error());
	first_pick_summary("none", "configuration error");
	return zap__fail(-EINVAL, "%s: %s", r->name, unprefixed(r->name, reason));
}

ZAP_EXPORT int zap_pick(const char *pref, unsigned flags, const struct zap_attr *attr,
			struct zap_transport **out)
{
	const struct zap_config *cfg = zap__config();
	struct zap_open_args args;
	uint64_t send_timeout_ms = 0;
	struct plan pl;
	bool strict = false;
	int rc;

	zap__clear_error();
	if (!out)
		return zap__fail(-EINVAL, "zap_pick: NULL out");
	if (cfg->error) {
		zap__log(ZAP_LOG_ERROR, "core", "%s", cfg->error_msg);
		return zap__fail(cfg->error, "%s", cfg->error_msg);
	}
	rc = resolve_attr(attr, &args, &send_timeout_ms);
	if (rc)
		return rc;
	rc = plan_for(pref, flags, true, &pl, &strict);
	if (rc) {
		/* Returned with its reason, not also logged: the caller decides
		 * what a failed pick means. */
		char reason[512];

		snprintf(reason, sizeof(reason), "%s", zap_last_error());
		first_pick_summary("none", "nothing usable");
		return zap__fail(rc, "%s", reason);
	}
	for (size_t i = 0; i < pl.n; i++) {
		const struct zap_prec *r = pl.cand[i];

		/* Probed out of process: load it here now (only this one). */
		rc = zap__load(r);
		if (!rc)
			rc = open_blocked(r, &args, send_timeout_ms, out);
		if (!rc) {
			pick_won(&pl, i, r);
			return 0;
		}
		if (rc == -EINVAL)
			return pick_config_error(r);
		append(pl.unavailable, sizeof(pl.unavailable), "%s%s: open failed: %s",
		       pl.unavailable[0] ? "; " : "", r->name,
		       unprefixed(r->name, zap_last_error()));
		if (strict && i + 1 >= pl.requested)
			break;
		zap__log(ZAP_LOG_DEBUG, "pick", "'%s' failed to open (%s)%s", r->name,
			 zap_last_error(), i + 1 < pl.n ? "; trying the next" : "");
	}
	first_pick_summary("none", "nothing usable");
	/*
	 * Strict: the open error of the transport asked for (zap.h). Not
	 * strict: every candidate was tried, so the request is unavailable
	 * here; the reasons say what each one answered.
	 */
	if (!strict)
		rc = ZAP_ENOTAVAIL;
	return zap__fail(rc, "%s", pl.unavailable);
}

ZAP_EXPORT int zap_pick_explain(const char *pref, unsigned flags, struct zap_choice *out)
{
	const struct zap_config *cfg = zap__config();
	struct zap_choice c;
	struct plan pl;
	bool strict = false;
	int rc;

	zap__clear_error();
	if (!out || out->size < offsetof(struct zap_choice, reason) + sizeof(out->reason))
		return zap__fail(-EINVAL, "zap_pick_explain: bad struct zap_choice");
	memset(&c, 0, sizeof(c));
	c.size = out->size;
	if (cfg->error) {
		rc = zap__fail(cfg->error, "%s", cfg->error_msg);
		snprintf(c.reason, sizeof(c.reason), "%s", cfg->error_msg);
	} else if ((rc = plan_for(pref, flags, false, &pl, &strict))) {
		snprintf(c.reason, sizeof(c.reason), "%s", zap_last_error());
	} else {
		const struct zap_prec *r = pl.cand[0];

		snprintf(c.name, sizeof(c.name), "%s", r->name);
		c.fallback = pl.named && pl.requested == 0;
		if (c.fallback)
			snprintf(c.reason, sizeof(c.reason),
				 "fallback to %s (rank %d): %.440s", r->name, r->rank,
				 pl.unavailable);
		else
			snprintf(c.reason, sizeof(c.reason), "%s (rank %d, %s)", r->name,
				 r->rank, pl.how);
	}
	memcpy(out, &c, sizeof(c));
	return rc;
}
