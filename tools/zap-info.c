/* SPDX-License-Identifier: MIT */
/*
 * zap-info: what libzap sees on this host.
 *
 * Prints the plugin directories searched, one row per plugin candidate
 * (the load report), and the transport zap_pick() would choose now, and
 * why. Exit status tells scripts whether the requested transport is
 * available without falling back; see usage() and tools/zap-info.md.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zap/zap.h>
#include <zap/zap-plugin.h>

#include "zap-info.h"
#include "zap-tls.h"

/* Documented in usage() and zap-info(1); scripts rely on them. */
enum {
	EXIT_AVAILABLE = 0,   /* requested (or auto) transport available */
	EXIT_FALLBACK = 1,    /* a pick would fall back to another one */
	EXIT_USAGE = 2,       /* usage, bad preference/env, internal error */
	EXIT_NONE = 3,        /* nothing usable: strict request unavailable,
	                         everything excluded */
};

struct opts {
	int verbose;
	int json;
	int env; /* --env: the configuration registry, nothing scanned */
	int isolate;
	unsigned timeout_ms;
	const char *transport; /* --transport, or NULL for ZAP_TRANSPORT */
};

/* Everything gathered from libzap, then printed as text or JSON. */
struct info {
	int ndirs, nrows, nregistered;
	struct zap_dir_entry *dirs;
	struct zap_report_entry *rows;
	const char *const *registered;
	const char *request;     /* the preference explained, "" for auto */
	const char *source;      /* "--transport", "ZAP_TRANSPORT", "auto" */
	struct zap_choice choice;
	int pick_err;            /* zap_pick_explain()'s return */
	const char *pick_status; /* "ok", "fallback", "not available", "error" */
	int exit_status;
};

static void usage(FILE *f)
{
	fputs(
"Usage: zap-info [OPTION]...\n"
"Show the libzap plugin directories searched, every plugin candidate with\n"
"its load state, and the transport zap_pick() would choose now, and why.\n"
"\n"
"  -t, --transport PREF  explain PREF (zap_pick() syntax: name, a,b, ^a,\n"
"                        =name for strict) instead of $ZAP_TRANSPORT\n"
"  -v, --verbose         add probe detail lines, full capabilities and the\n"
"                        TLS settings (mode, key fingerprint, trust, kTLS)\n"
"  -j, --json            print JSON for scripts (fields below)\n"
"  -e, --env             list every ZAP_* variable libzap reads: its value\n"
"                        and where it came from (environment, default,\n"
"                        ignored under AT_SECURE, invalid: reason); with\n"
"                        -v also type, range, setuid policy and meaning;\n"
"                        with --json {version, env: [{name, type, owner,\n"
"                        default, setuid, doc, min, max, choices, value,\n"
"                        source, reason}]}. Exit status 2 if one is invalid\n"
"  -i, --isolate         probe each plugin in a helper process, so a plugin\n"
"                        that crashes or hangs is reported (the default of\n"
"                        every libzap program; overrides ZAP_PROBE_INPROCESS)\n"
"      --timeout MS      time limit of each probe (default 5000)\n"
"  -h, --help            show this help\n"
"  -V, --version         show the libzap version\n"
"\n"
"Environment: ZAP_PLUGIN_PATH, ZAP_TRANSPORT, ZAP_LOG_LEVEL,\n"
"ZAP_PROBE_INPROCESS and the other ZAP_* variables are honoured as by any\n"
"libzap program.\n"
"\n"
"Exit status:\n"
"  0  the requested transport (auto if none) is available, no fallback\n"
"  1  a pick would fall back to another transport (requested one\n"
"     unavailable or unknown); the reason is printed on stderr\n"
"  2  usage error, malformed preference, bad ZAP_* value, internal error\n"
"  3  nothing usable: a pick would fail (strict request unavailable,\n"
"     everything excluded); the reason is printed on stderr\n"
"\n"
"JSON output (--json), one object:\n"
"  version        libzap version string\n"
"  abi            {major, minor}: plugin ABI this libzap loads\n"
"  isolated       true when --isolate was given (probes run in helper\n"
"                 processes unless ZAP_PROBE_INPROCESS=1, with or without it)\n"
"  directories    [{path, source, status}] in search order; source is\n"
"                 \"ZAP_PLUGIN_PATH\", \"ZAP_PLUGIN_DIR\" or \"built-in\";\n"
"                 status \"ok\", \"missing\" or \"refused: <why>\"\n"
"  plugins        [{name, state, reason, detail, version, rank, builtin,\n"
"                 path, caps}] one per candidate, the built-in default\n"
"                 first; state is one of \"loaded\", \"not present\",\n"
"                 \"error\", \"no symbol\", \"ABI mismatch\", \"invalid\",\n"
"                 \"refused\", \"shadowed\", \"dlopen failed\" (as\n"
"                 zap_plugin_state_name()); caps is {gpu_resident,\n"
"                 zero_copy, device_buffers, min_latency_us, max_msg_size}\n"
"  registered     [name] transports a pick may attempt, best rank first\n"
"  pick           {request, source, name, status, fallback, available,\n"
"                 error, reason}: request is the preference explained\n"
"                 (\"\" for auto), source \"--transport\", \"ZAP_TRANSPORT\"\n"
"                 or \"auto\"; name the transport a pick would open (null\n"
"                 if none); status \"ok\", \"fallback\", \"not available\" or\n"
"                 \"error\"; error the negative errno or 0\n"
"  exit_status    the exit status zap-info returns\n",
		f);
}

/* ---- text output ------------------------------------------------------- */

static void human_bytes(char *buf, size_t len, uint64_t n)
{
	static const char units[] = "KMGTPE";
	int i = -1;

	while (n >= 1024 && n % 1024 == 0 && i < 5) {
		n /= 1024;
		i++;
	}
	if (i < 0)
		snprintf(buf, len, "%llu", (unsigned long long)n);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)n, units[i]);
}

static void caps_summary(char *buf, size_t len,
			 const struct zap_report_entry *e)
{
	const struct zap_caps *c = &e->caps;
	char num[32];
	size_t used = 0;

	buf[0] = '\0';
#define CAPS_ADD(...)                                                         \
	used += (size_t)snprintf(buf + used, used < len ? len - used : 0,     \
				 __VA_ARGS__)
	if (c->gpu_resident)
		CAPS_ADD("%sgpu", used ? "," : "");
	if (c->zero_copy)
		CAPS_ADD("%szero-copy", used ? "," : "");
	if (c->device_buffers)
		CAPS_ADD("%sdevbuf", used ? "," : "");
	if (c->min_latency_us > 0)
		CAPS_ADD("%slat=%.3gus", used ? "," : "", c->min_latency_us);
	if (c->max_msg_size) {
		human_bytes(num, sizeof(num), c->max_msg_size);
		CAPS_ADD("%smax=%s", used ? "," : "", num);
	}
#undef CAPS_ADD
	if (!used)
		snprintf(buf, len, "-");
}

/* Print @text's lines, each after @indent; @first labels the first one. */
static void print_lines(const char *indent, const char *first,
			const char *text)
{
	const char *p = text;
	size_t label = strlen(first);

	while (*p) {
		size_t n = strcspn(p, "\n");

		printf("%s%-*s%.*s\n", indent, (int)label,
		       p == text ? first : "", (int)n, p);
		p += n;
		if (*p)
			p++;
	}
}

static int maxi(int a, int b)
{
	return a > b ? a : b;
}

static void quiet_log(enum zap_log_level level, const char *domain,
		      const char *msg, void *user)
{
}

/*
 * -v: the buffer pool figures of the transport a pick chooses, when its
 * pool is device memory (uma, gpudirect). That needs an open instance
 * (pools belong to instances); opening one binds a loopback socket and
 * allocates no pool memory, and is closed at once. Other transports are
 * not opened: for dpdk that would start the EAL and take the port.
 */
static void print_pool(const struct info *in, const struct opts *o)
{
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_pool_stats st = { .size = sizeof(st) };
	const struct zap_report_entry *e = NULL;
	struct zap_transport *t;
	char cap[32], owned[32], used[32], high[32];
	int rc;

	if (o->isolate || !in->choice.name[0])
		return;
	for (int i = 0; i < in->nrows; i++)
		if (!strcmp(in->rows[i].name, in->choice.name) &&
		    in->rows[i].state == ZAP_PLUGIN_LOADED)
			e = &in->rows[i];
	if (!e || !e->caps.device_buffers) {
		printf("  pool:    %s has no device-memory pool (not opened)\n",
		       in->choice.name);
		return;
	}
	zap_set_log_handler(quiet_log, NULL);
	rc = zap_pick(in->choice.name, ZAP_PICK_STRICT, &attr, &t);
	zap_set_log_handler(NULL, NULL);
	if (rc) {
		printf("  pool:    (could not open %s: %s)\n", in->choice.name,
		       zap_strerror(rc));
		return;
	}
	rc = zap_pool_stats(t, &st);
	if (rc) {
		printf("  pool:    (%s)\n", zap_strerror(rc));
	} else {
		human_bytes(cap, sizeof(cap), st.cap);
		human_bytes(owned, sizeof(owned), st.owned);
		human_bytes(used, sizeof(used), st.in_use);
		human_bytes(high, sizeof(high), st.high_water);
		printf("  pool:    cap %s, owned %s, in use %s, high water %s "
		       "(a fresh instance)\n", cap, owned, used, high);
	}
	zap_close(t);
}

/*
 * The TCP wire's TLS settings (default, uma), loaded and checked as an
 * endpoint would load them: the mode, this endpoint's key fingerprint (the
 * line other nodes pin), whom it trusts, and whether kernel TLS is there.
 */
/* The TLS settings an endpoint would read from the environment. */
static struct ztls_config env_tls_config(void)
{
	return (struct ztls_config){
		.cert = zi_env_value("ZAP_TLS_CERT"), .key = zi_env_value("ZAP_TLS_KEY"),
		.ca = zi_env_value("ZAP_TLS_CA"), .peers = zi_env_value("ZAP_TLS_PEERS"),
	};
}

static void print_tls(void)
{
	struct ztls_config cfg = env_tls_config();
	cfg.ktls = true;
	struct ztls_ctx *x = NULL;
	char why[512];

	printf("\ntls (default, uma):\n");
	if (!cfg.cert || !*cfg.cert) {
		printf("  mode:    off (ZAP_TLS_CERT unset): plaintext, peers are addresses\n");
		return;
	}
	if (ztls_ctx_new(&cfg, &x, why, sizeof(why))) {
		printf("  mode:    error: %s\n", why);
		printf("           (opening default or uma fails until this is fixed)\n");
		return;
	}
	printf("  mode:    TLS 1.3, mutual authentication, ALPN %s; no plaintext\n",
	       ZTLS_ALPN);
	printf("  key:     %s\n", ztls_ctx_fingerprint(x));
	printf("  trust:   %s\n", ztls_ctx_trust(x));
	printf("  kTLS:    %s\n",
	       ztls_ctx_ktls(x)
		       ? "offered by the kernel: connections ask OpenSSL to hand records to it (SSL_OP_ENABLE_KTLS)"
		       : "not in use: the kernel offers no TLS ULP (\"tls\" not in /proc/sys/net/ipv4/tcp_available_ulp); records are encrypted in userspace");
	ztls_ctx_free(x);
}

static void print_text(const struct info *in, const struct opts *o)
{
	int wname = 4, wstate = 5, wver = 7, wcaps = 4, i;
	char caps[128];

	printf("libzap %s (plugin ABI %d.%d)%s\n\n", zap_version(),
	       ZAP_PLUGIN_ABI_MAJOR, ZAP_PLUGIN_ABI_MINOR,
	       o->isolate ? ", probes isolated" : "");

	printf("plugin directories, in search order:\n");
	for (i = 0; i < in->ndirs; i++)
		printf("  %-8s %s  [%s]\n", in->dirs[i].status,
		       in->dirs[i].path, in->dirs[i].source);
	if (!in->ndirs)
		printf("  (none)\n");

	for (i = 0; i < in->nrows; i++) {
		const struct zap_report_entry *e = &in->rows[i];

		caps_summary(caps, sizeof(caps), e);
		wname = maxi(wname, (int)strlen(e->name));
		wstate = maxi(wstate, (int)strlen(zap_plugin_state_name(e->state)));
		wver = maxi(wver, (int)strlen(e->version));
		wcaps = maxi(wcaps, (int)strlen(caps));
	}
	printf("\ntransports:\n  %-*s  %-*s  %4s  %-*s  %-*s  %s\n", wname,
	       "NAME", wstate, "STATE", "RANK", wver, "VERSION", wcaps, "CAPS",
	       "PATH");
	for (i = 0; i < in->nrows; i++) {
		const struct zap_report_entry *e = &in->rows[i];
		char indent[64];

		caps_summary(caps, sizeof(caps), e);
		printf("  %-*s  %-*s  %4d  %-*s  %-*s  %s\n", wname,
		       e->name[0] ? e->name : "?", wstate,
		       zap_plugin_state_name(e->state), e->rank, wver,
		       e->version[0] ? e->version : "-", wcaps, caps, e->path);
		snprintf(indent, sizeof(indent), "  %*s  ", wname, "");
		if (e->reason[0])
			print_lines(indent, o->verbose ? "reason: " : "",
				    e->reason);
		if (!o->verbose)
			continue;
		printf("%scaps:   gpu_resident=%s zero_copy=%s "
		       "device_buffers=%s min_latency_us=%g max_msg_size=%llu\n",
		       indent, e->caps.gpu_resident ? "yes" : "no",
		       e->caps.zero_copy ? "yes" : "no",
		       e->caps.device_buffers ? "yes" : "no",
		       e->caps.min_latency_us,
		       (unsigned long long)e->caps.max_msg_size);
		if (e->detail[0])
			print_lines(indent, "detail: ", e->detail);
	}

	if (o->verbose) {
		printf("\nregistered:");
		for (i = 0; i < in->nregistered; i++)
			printf(" %s", in->registered[i]);
		printf("\n");
	}

	printf("\npick: %s\n", in->choice.name[0] ? in->choice.name : "(none)");
	if (in->request[0])
		printf("  request: \"%s\" (%s)\n", in->request, in->source);
	else
		printf("  request: auto (%s)\n",
		       strcmp(in->source, "auto") ? in->source
						   : "ZAP_TRANSPORT unset");
	printf("  status:  %s\n", in->pick_status);
	if (in->choice.reason[0])
		printf("  why:     %s\n", in->choice.reason);
	if (o->verbose) {
		print_pool(in, o);
		print_tls();
	}
}

/* ---- JSON output ------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at @s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
	size_t n, i;
	unsigned c = s[0];

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	for (i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	/* overlong 3/4-byte forms, surrogates, beyond U+10FFFF */
	if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) ||
	    (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))
		return 0;
	return n;
}

/* A JSON string; bytes that are not UTF-8 (odd file names) become U+FFFD. */
void json_str(const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	putchar('"');
	while (*p) {
		size_t n;

		switch (*p) {
		case '"': fputs("\\\"", stdout); p++; continue;
		case '\\': fputs("\\\\", stdout); p++; continue;
		case '\n': fputs("\\n", stdout); p++; continue;
		case '\r': fputs("\\r", stdout); p++; continue;
		case '\t': fputs("\\t", stdout); p++; continue;
		default: break;
		}
		if (*p < 0x20 || *p == 0x7f) {
			printf("\\u%04x", *p++);
			continue;
		}
		n = utf8_len(p);
		if (!n) {
			fputs("\\ufffd", stdout);
			p++;
			continue;
		}
		fwrite(p, 1, n, stdout);
		p += n;
	}
	putchar('"');
}

/*
 * The emitter writes `"key": value` pairs; @sep goes before each pair:
 * ", " inside one-line objects, ",\n" plus indentation otherwise, "" for
 * the first.
 */
void json_key(const char *sep, const char *key)
{
	fputs(sep, stdout);
	json_str(key);
	fputs(": ", stdout);
}

void json_kstr(const char *sep, const char *key, const char *v)
{
	json_key(sep, key);
	json_str(v);
}

static void json_kbool(const char *sep, const char *key, bool b)
{
	json_key(sep, key);
	fputs(b ? "true" : "false", stdout);
}

static void json_kint(const char *sep, const char *key, long long v)
{
	json_key(sep, key);
	printf("%lld", v);
}

static void json_caps(const struct zap_caps *c)
{
	double lat = c->min_latency_us;

	/* JSON has no NaN or infinity. */
	if (!isfinite(lat))
		lat = 0;
	printf("{");
	json_kbool("", "gpu_resident", c->gpu_resident);
	json_kbool(", ", "zero_copy", c->zero_copy);
	json_kbool(", ", "device_buffers", c->device_buffers);
	json_key(", ", "min_latency_us");
	printf("%.17g", lat);
	json_key(", ", "max_msg_size");
	printf("%llu}", (unsigned long long)c->max_msg_size);
}

#define J1 ",\n  "     /* between top-level members */
#define J2 ",\n      " /* between members of a plugin row */
#define J3 ",\n    "   /* between members of pick */

static void print_json(const struct info *in, const struct opts *o)
{
	int i;

	printf("{\n");
	json_kstr("  ", "version", zap_version());
	json_key(J1, "abi");
	printf("{\"major\": %d, \"minor\": %d}", ZAP_PLUGIN_ABI_MAJOR,
	       ZAP_PLUGIN_ABI_MINOR);
	json_kbool(J1, "isolated", o->isolate);

	json_key(J1, "directories");
	printf("[");
	for (i = 0; i < in->ndirs; i++) {
		printf("%s\n    {", i ? "," : "");
		json_kstr("", "path", in->dirs[i].path);
		json_kstr(", ", "source", in->dirs[i].source);
		json_kstr(", ", "status", in->dirs[i].status);
		printf("}");
	}
	printf("%s]", in->ndirs ? "\n  " : "");

	json_key(J1, "plugins");
	printf("[");
	for (i = 0; i < in->nrows; i++) {
		const struct zap_report_entry *e = &in->rows[i];

		printf("%s\n    {\n", i ? "," : "");
		json_kstr("      ", "name", e->name);
		json_kstr(J2, "state", zap_plugin_state_name(e->state));
		json_kstr(J2, "reason", e->reason);
		json_kstr(J2, "detail", e->detail);
		json_kstr(J2, "version", e->version);
		json_kint(J2, "rank", e->rank);
		json_kbool(J2, "builtin", e->builtin);
		json_kstr(J2, "path", e->path);
		json_key(J2, "caps");
		json_caps(&e->caps);
		printf("\n    }");
	}
	printf("%s]", in->nrows ? "\n  " : "");

	json_key(J1, "registered");
	printf("[");
	for (i = 0; i < in->nregistered; i++) {
		printf("%s", i ? ", " : "");
		json_str(in->registered[i]);
	}
	printf("]");

	json_key(J1, "pick");
	printf("{\n");
	json_kstr("    ", "request", in->request);
	json_kstr(J3, "source", in->source);
	json_key(J3, "name");
	if (in->choice.name[0])
		json_str(in->choice.name);
	else
		printf("null");
	json_kstr(J3, "status", in->pick_status);
	json_kbool(J3, "fallback", in->pick_err == 0 && in->choice.fallback);
	json_kbool(J3, "available", in->exit_status == EXIT_AVAILABLE);
	json_kint(J3, "error", in->pick_err);
	json_kstr(J3, "reason", in->choice.reason);
	printf("\n  }");

	json_kint(J1, "exit_status", in->exit_status);
	printf("\n}\n");
}

/* ---- gathering ---------------------------------------------------------- */

/* Scan, and copy the load report, the directories and the registered
 * transports into @in. 0, or -1 with the reason on stderr. */
static int gather_report(struct info *in, const struct opts *o)
{
	struct zap_scan_attr sa = {
		.size = sizeof(sa),
		.flags = o->isolate ? ZAP_SCAN_ISOLATE : 0,
		.probe_timeout_ms = o->timeout_ms,
	};
	int err, i;

	err = zap_scan(&sa);
	if (err && err != -EALREADY) {
		fprintf(stderr, "zap-info: scan failed: %s\n",
			zap_strerror(err));
		return -1;
	}
	in->nrows = zap_report_count();
	in->ndirs = zap_report_dir_count();
	if (in->nrows < 0 || in->ndirs < 0) {
		err = in->nrows < 0 ? in->nrows : in->ndirs;
		fprintf(stderr, "zap-info: load report: %s\n",
			zap_strerror(err));
		return -1;
	}
	in->rows = calloc((size_t)in->nrows + 1, sizeof(*in->rows));
	in->dirs = calloc((size_t)in->ndirs + 1, sizeof(*in->dirs));
	if (!in->rows || !in->dirs) {
		fprintf(stderr, "zap-info: out of memory\n");
		return -1;
	}
	for (i = 0; i < in->nrows; i++) {
		in->rows[i].size = sizeof(in->rows[i]);
		err = zap_report_get((size_t)i, &in->rows[i]);
		if (err) {
			fprintf(stderr, "zap-info: report row %d: %s\n", i,
				zap_strerror(err));
			return -1;
		}
	}
	for (i = 0; i < in->ndirs; i++) {
		in->dirs[i].size = sizeof(in->dirs[i]);
		err = zap_report_dir_get((size_t)i, &in->dirs[i]);
		if (err) {
			fprintf(stderr, "zap-info: directory %d: %s\n", i,
				zap_strerror(err));
			return -1;
		}
	}
	in->nregistered = zap_registered(&in->registered);
	if (in->nregistered < 0) {
		fprintf(stderr, "zap-info: registered transports: %s\n",
			zap_strerror(in->nregistered));
		return -1;
	}
	return 0;
}

/*
 * Whether the TLS settings would make opening @name fail (the transports
 * that run TLS: default, uma and gpudirect's bootstrap), with the reason.
 * zap_pick_explain() opens nothing, so without this a pick that fails on
 * its first open would read "ok".
 */
static bool tls_unusable(const char *name, char *why, size_t len)
{
	struct ztls_config cfg = env_tls_config();
	struct ztls_ctx *x = NULL;
	const char *partial;

	if (strcmp(name, "default") && strcmp(name, "uma") && strcmp(name, "gpudirect"))
		return false;
	partial = ztls_partial_config(cfg.cert, cfg.key, cfg.ca, cfg.peers);
	if (partial) {
		snprintf(why, len, "%.32s: open would fail: %s", name, partial);
		return true;
	}
	if (!cfg.cert || ztls_ctx_new(&cfg, &x, why, len) == 0) {
		ztls_ctx_free(x);
		return false;
	}
	char tls[400];
	snprintf(tls, sizeof(tls), "%.399s", why);
	snprintf(why, len, "%.32s: open would fail: TLS: %s", name, tls);
	return true;
}

/* What a pick would do now with the requested preference, and the exit
 * status that follows from it. */
static void gather_pick(struct info *in, const struct opts *o)
{
	const char *env = zi_env_value("ZAP_TRANSPORT");

	if (o->transport) {
		in->request = o->transport;
		in->source = "--transport";
	} else if (env && *env) {
		in->request = env;
		in->source = "ZAP_TRANSPORT";
	} else {
		in->request = "";
		in->source = "auto";
	}
	in->choice.size = sizeof(in->choice);
	in->pick_err = zap_pick_explain(o->transport, 0, &in->choice);
	/* A configuration error fails every pick (-EINVAL, docs/loader.md). */
	if (in->pick_err == 0 &&
	    tls_unusable(in->choice.name, in->choice.reason, sizeof(in->choice.reason)))
		in->pick_err = -EINVAL;
	if (in->pick_err == 0) {
		in->pick_status = in->choice.fallback ? "fallback" : "ok";
		in->exit_status = in->choice.fallback ? EXIT_FALLBACK
						      : EXIT_AVAILABLE;
		/* `zap-info -t x && run-job` must not pass silently; the
		 * reason reads "fallback to <name> (rank <n>): <why>". */
		if (in->choice.fallback)
			fprintf(stderr, "zap-info: %s\n", in->choice.reason);
	} else if (in->pick_err == ZAP_ENOTAVAIL) {
		in->pick_status = "not available";
		in->exit_status = EXIT_NONE;
		in->choice.name[0] = '\0';
		fprintf(stderr, "zap-info: not available: %s\n", in->choice.reason);
	} else {
		in->pick_status = "error";
		in->exit_status = EXIT_USAGE;
		in->choice.name[0] = '\0';
		if (!in->choice.reason[0])
			snprintf(in->choice.reason, sizeof(in->choice.reason),
				 "%s", zap_strerror(in->pick_err));
		fprintf(stderr, "zap-info: %s\n", in->choice.reason);
	}
}

static int gather(struct info *in, const struct opts *o)
{
	if (gather_report(in, o))
		return -1;
	gather_pick(in, o);
	return 0;
}

/* --timeout's value: whole milliseconds, 1 to an hour. */
static int parse_timeout(const char *arg, struct opts *o)
{
	char *end;
	unsigned long ms;

	errno = 0;
	ms = strtoul(arg, &end, 10);
	if (errno || end == arg || *end || ms == 0 ||
	    ms > 3600000 || arg[0] == '-') {
		fprintf(stderr, "zap-info: --timeout wants "
			"milliseconds in 1..3600000, not '%s'\n",
			arg);
		return -1;
	}
	o->timeout_ms = (unsigned)ms;
	return 0;
}

/* The command line into @o: -1 to go on, else the exit status now (after
 * --help, --version or a usage error). */
static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "transport", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "json", no_argument, NULL, 'j' },
		{ "env", no_argument, NULL, 'e' },
		{ "isolate", no_argument, NULL, 'i' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "t:vjeihV", longopts, NULL)) != -1) {
		switch (c) {
		case 't':
			o->transport = optarg;
			break;
		case 'v':
			o->verbose = 1;
			break;
		case 'j':
			o->json = 1;
			break;
		case 'e':
			o->env = 1;
			break;
		case 'i':
			o->isolate = 1;
			break;
		case 'T':
			if (parse_timeout(optarg, o))
				return EXIT_USAGE;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("zap-info (libzap) %s\n", zap_version());
			return 0;
		default:
			fprintf(stderr, "Try 'zap-info --help'.\n");
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "zap-info: unexpected argument '%s'\n"
			"Try 'zap-info --help'.\n", argv[optind]);
		return EXIT_USAGE;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct info in = { 0 };
	int rc;

	rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	if (o.env)
		return zi_print_env(o.json, o.verbose);
	if (gather(&in, &o) != 0)
		return EXIT_USAGE;
	if (o.json)
		print_json(&in, &o);
	else
		print_text(&in, &o);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		perror("zap-info: stdout");
		return EXIT_USAGE;
	}
	free(in.rows);
	free(in.dirs);
	return in.exit_status;
}
