/* SPDX-License-Identifier: MIT */
/*
 * The pin file parser (util/tls, ztls_pins_parse()) against an independent
 * reading of the format in zap-tls.h: lines split on '\n', blanks (space,
 * tab, CR) trimmed at both ends, empty and '#' lines skipped, every other
 * line exactly "sha256:" and 64 hex digits.
 *
 * Properties: the parser accepts exactly what the reference accepts; on
 * success the set is sorted, without duplicates, and equals the
 * reference's set; every pin is found by ztls_pins_has() and formats back
 * (ztls_fp_format()) to text that ztls_fp_parse() reads to the same bytes.
 */
#include <ctype.h>
#include <errno.h>

#include "fuzz.h"
#include "zap-tls.h"

static int cmp32(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

/* -1: refused; else the number of distinct pins, into @set (sorted). */
static long ref_parse(const char *t, size_t len, unsigned char (*set)[32])
{
	size_t n = 0;

	if (len > ZTLS_PINS_MAX_BYTES || memchr(t, '\0', len))
		return -1;
	size_t start = 0;
	while (start <= len) {
		size_t end = start;
		while (end < len && t[end] != '\n')
			end++;
		size_t a = start, b = end;
		while (a < b && strchr(" \t\r", t[a]))
			a++;
		while (b > a && strchr(" \t\r", t[b - 1]))
			b--;
		if (a < b && t[a] != '#') {
			if (b - a != 71 || strncmp(t + a, "sha256:", 7))
				return -1;
			for (size_t i = 0; i < 32; i++) {
				unsigned v;
				char h[3] = {t[a + 7 + 2 * i], t[a + 8 + 2 * i], 0};
				if (!isxdigit((unsigned char)h[0]) ||
				    !isxdigit((unsigned char)h[1]))
					return -1;
				sscanf(h, "%2x", &v);
				set[n][i] = (unsigned char)v;
			}
			n++;
		}
		if (end == len)
			break;
		start = end + 1;
	}
	qsort(set, n, 32, cmp32);
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!k || memcmp(set[i], set[k - 1], 32))
			memmove(set[k++], set[i], 32);
	return (long)k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ztls_pins p;
	char why[256];
	unsigned char (*ref)[32] = malloc((size / 71 + 1) * 32);

	if (!ref)
		abort();
	long rn = ref_parse((const char *)data, size, ref);
	int r = ztls_pins_parse((const char *)data, size, &p, why, sizeof(why));
	FUZZ_CHECK((r == 0) == (rn >= 0));
	if (r) {
		FUZZ_CHECK(r == -EINVAL || r == -E2BIG);
		FUZZ_CHECK(why[0] != '\0');
	} else {
		FUZZ_CHECK(p.n == (size_t)rn);
		for (size_t i = 0; i < p.n; i++) {
			char txt[ZTLS_FP_LEN];
			unsigned char back[32];
			FUZZ_CHECK(!memcmp(p.fp[i], ref[i], 32));
			FUZZ_CHECK(i == 0 || memcmp(p.fp[i - 1], p.fp[i], 32) < 0);
			FUZZ_CHECK(ztls_pins_has(&p, p.fp[i]));
			ztls_fp_format(p.fp[i], txt);
			FUZZ_CHECK(strlen(txt) == ZTLS_FP_LEN - 1);
			FUZZ_CHECK(ztls_fp_parse(txt, strlen(txt), back) == 0);
			FUZZ_CHECK(!memcmp(back, p.fp[i], 32));
		}
		ztls_pins_free(&p);
	}
	free(ref);
	return 0;
}
