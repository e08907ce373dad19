/* SPDX-License-Identifier: MIT */
/*
 * Pin files and fingerprint text: pure code (no OpenSSL, no I/O), so that
 * fuzz/fuzz-tls-pins.c drives it directly. No shared state.
 */
#include "zap-tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

int ztls_fp_parse(const char *s, size_t len, unsigned char fp[32])
{
	size_t pl = sizeof(ZTLS_FP_PREFIX) - 1;

	if (len != pl + 64 || memcmp(s, ZTLS_FP_PREFIX, pl))
		return -EINVAL;
	for (size_t i = 0; i < 32; i++) {
		int hi = hexval(s[pl + 2 * i]), lo = hexval(s[pl + 2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		fp[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

void ztls_fp_format(const unsigned char fp[32], char out[ZTLS_FP_LEN])
{
	static const char hex[] = "0123456789abcdef";
	size_t pl = sizeof(ZTLS_FP_PREFIX) - 1;

	memcpy(out, ZTLS_FP_PREFIX, pl);
	for (size_t i = 0; i < 32; i++) {
		out[pl + 2 * i] = hex[fp[i] >> 4];
		out[pl + 2 * i + 1] = hex[fp[i] & 15];
	}
	out[pl + 64] = '\0';
}

static int fp_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

static bool blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

int ztls_pins_parse(const char *text, size_t len, struct ztls_pins *out, char *why,
		    size_t whylen)
{
	size_t cap = 0, n = 0, line = 0;
	unsigned char(*fp)[32] = NULL;

	out->fp = NULL;
	out->n = 0;
	if (len > ZTLS_PINS_MAX_BYTES) {
		snprintf(why, whylen, "pin file is larger than %u bytes",
			 ZTLS_PINS_MAX_BYTES);
		return -E2BIG;
	}
	if (memchr(text, '\0', len)) {
		snprintf(why, whylen, "pin file holds a NUL byte");
		return -EINVAL;
	}
	for (size_t pos = 0; pos < len;) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - text) : len;
		size_t a = pos, b = end;

		line++;
		pos = nl ? end + 1 : len;
		while (a < b && blank(text[a]))
			a++;
		while (b > a && blank(text[b - 1]))
			b--;
		if (a == b || text[a] == '#')
			continue;
		if (n == ZTLS_PINS_MAX) {
			snprintf(why, whylen, "more than %u pins", ZTLS_PINS_MAX);
			free(fp);
			return -E2BIG;
		}
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 8;
			unsigned char(*np)[32] = realloc(fp, nc * sizeof(*np));
			if (!np) {
				snprintf(why, whylen, "out of memory");
				free(fp);
				return -ENOMEM;
			}
			fp = np;
			cap = nc;
		}
		if (ztls_fp_parse(text + a, b - a, fp[n])) {
			snprintf(why, whylen,
				 "line %zu: want \"sha256:\" and 64 hex digits (the SHA-256 of the DER SubjectPublicKeyInfo)",
				 line);
			free(fp);
			return -EINVAL;
		}
		n++;
	}
	if (n) {
		qsort(fp, n, 32, fp_cmp);
		size_t k = 1;
		for (size_t i = 1; i < n; i++)
			if (memcmp(fp[i], fp[k - 1], 32))
				memcpy(fp[k++], fp[i], 32);
		n = k;
	}
	out->fp = fp;
	out->n = n;
	return 0;
}

void ztls_pins_free(struct ztls_pins *p)
{
	if (!p)
		return;
	free(p->fp);
	p->fp = NULL;
	p->n = 0;
}

bool ztls_pins_has(const struct ztls_pins *p, const unsigned char fp[32])
{
	return p->n && bsearch(fp, p->fp, p->n, 32, fp_cmp);
}
