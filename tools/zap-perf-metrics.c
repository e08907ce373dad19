/* SPDX-License-Identifier: MIT */
/*
 * zap-perf --metrics: both ends' counters after a run, as one Prometheus
 * text exposition. Each end renders its own (zap_metrics_render()); the
 * server sends its text to the client as one message; the client merges
 * the two family by family, since a family may appear only once in an
 * exposition. Single-threaded, like the rest of zap-perf.
 */
#include <stdlib.h>
#include <string.h>

#include "zap-perf.h"

static char *ours, *theirs;

/* @t's metrics, malloc'd; a comment line when it has none. */
static char *render(struct zap_transport *t)
{
	int n = zap_metrics_render(t, NULL, 0);
	char *s;

	if (n < 0) {
		const char *why = zap_strerror(n);
		s = malloc(strlen(why) + 64);
		if (s)
			sprintf(s, "# zap-perf: no metrics from %s: %s\n",
				zap_transport_name(t), why);
		return s;
	}
	s = malloc((size_t)n + 1);
	if (s && zap_metrics_render(t, s, (size_t)n + 1) < 0)
		s[0] = '\0';
	return s;
}

int perf_metrics_answer(struct zap_transport *t, const char *peer)
{
	char *s = render(t);
	int r = s ? zap_send(t, peer, s, strlen(s), NULL) : -1;

	free(s);
	return r ? -1 : 0;
}

void perf_metrics_collect(struct zap_transport *t, const char *peer)
{
	static const char cmd[] = "zperf metrics 0 0 0";
	struct zap_ctx *ctx = NULL;
	struct zap_msg *m = NULL;
	int r;

	free(ours);
	free(theirs);
	ours = theirs = NULL;
	r = zap_send(t, peer, cmd, sizeof(cmd) - 1, NULL);
	/* "ok", then the text; an older server says only "ok". */
	for (int i = 0; !r && i < 2; i++) {
		if (!ctx && zap_ctx_new(&ctx))
			break;
		zap_ctx_set_timeout(ctx, 5ull * 1000000000u);
		r = zap_recv(t, ctx, &m);
		if (!r && i == 1) {
			theirs = malloc(zap_msg_len(m) + 1);
			if (theirs) {
				memcpy(theirs, zap_msg_data(m), zap_msg_len(m));
				theirs[zap_msg_len(m)] = '\0';
			}
		}
		if (!r)
			zap_msg_release(m);
	}
	zap_ctx_free(ctx);
	if (!theirs) {
		const char *why = r ? zap_strerror(r) : "no answer";
		theirs = malloc(strlen(why) + 80);
		if (theirs)
			sprintf(theirs, "# zap-perf: no metrics from the server (%s; an older zap-perf?)\n",
				why);
	}
	ours = render(t);
}

/* ---- merging ------------------------------------------------------------ */

struct out {
	FILE *f;
	bool json;
};

static void put(const struct out *o, const char *s, size_t n)
{
	if (!o->json) {
		fwrite(s, 1, n, o->f);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"' || s[i] == '\\')
			fprintf(o->f, "\\%c", s[i]);
		else if (s[i] == '\n')
			fputs("\\n", o->f);
		else if ((unsigned char)s[i] < 0x20)
			fprintf(o->f, "\\u%04x", (unsigned char)s[i]);
		else
			fputc(s[i], o->f);
	}
}

/* The family a "# HELP name ..." line at @line names, into @name. */
static bool help_name(const char *line, char *name, size_t len)
{
	size_t k;

	if (strncmp(line, "# HELP ", 7))
		return false;
	line += 7;
	k = strcspn(line, " \n");
	if (k >= len)
		return false;
	memcpy(name, line, k);
	name[k] = '\0';
	return true;
}

/* Where @name's samples start in @text (after its HELP and TYPE lines),
 * and *@len their length; NULL when @text has no such family. */
static const char *samples_of(const char *text, const char *name, size_t *len)
{
	char want[160];
	const char *p, *end;

	snprintf(want, sizeof(want), "# TYPE %s ", name);
	for (p = text; (p = strstr(p, want)) && p != text && p[-1] != '\n'; p++)
		;
	if (!p)
		return NULL;
	p = strchr(p, '\n');
	if (!p)
		return NULL;
	p++;
	for (end = p; *end && strncmp(end, "# ", 2);) {
		const char *nl = strchr(end, '\n');
		end = nl ? nl + 1 : end + strlen(end);
	}
	*len = (size_t)(end - p);
	return p;
}

void perf_metrics_print(FILE *f, bool json)
{
	const struct out o = { f, json };
	const char *p = ours ? ours : "";

	if (!strstr(p, "# HELP ")) {
		/* We have none (a transport without counters): theirs whole. */
		put(&o, p, strlen(p));
		if (theirs)
			put(&o, theirs, strlen(theirs));
		return;
	}

	/* Our text in order; after each family's samples, the server's. */
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
		char name[128];
		bool fam = help_name(p, name, sizeof(name));
		put(&o, p, n);
		p += n;
		if (!fam)
			continue;
		/* The TYPE line and our samples. */
		while (*p && strncmp(p, "# HELP ", 7)) {
			nl = strchr(p, '\n');
			n = nl ? (size_t)(nl - p) + 1 : strlen(p);
			put(&o, p, n);
			p += n;
		}
		size_t len = 0;
		const char *s = theirs ? samples_of(theirs, name, &len) : NULL;
		if (s)
			put(&o, s, len);
	}
	/* The server's comments (why it has no metrics). */
	for (const char *q = theirs ? theirs : ""; *q;) {
		const char *nl = strchr(q, '\n');
		size_t n = nl ? (size_t)(nl - q) + 1 : strlen(q);
		if (!strncmp(q, "# zap-perf:", 11))
			put(&o, q, n);
		q += n;
	}
}
