/* SPDX-License-Identifier: MIT */
/*
 * Shared bits of the libFuzzer harnesses. Each fuzz-<name>.c defines
 * LLVMFuzzerTestOneInput(); under -Dfuzzing=true it is linked with
 * libFuzzer, and in every build with replay.c, which feeds it the seed
 * corpus and the regression inputs (meson test --suite fuzz). Every
 * harness needs a seed corpus, fuzz/corpus/<name>/, with at least one
 * input: the replay fails without one (replay.c, README.md).
 *
 * A harness checks more than "does not crash": FUZZ_CHECK() aborts (a
 * crash to libFuzzer) when a parser's result breaks a documented rule.
 */
#ifndef ZAP_FUZZ_H
#define ZAP_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "%s:%d: invariant failed: %s\n",     \
				__FILE__, __LINE__, #cond);                   \
			abort();                                              \
		}                                                             \
	} while (0)

/* A NUL-terminated heap copy of @n bytes (stops at an embedded NUL). */
static inline char *fuzz_strndup(const uint8_t *p, size_t n)
{
	char *s = malloc(n + 1);

	if (!s)
		abort();
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

/* Whether @s is NUL-terminated within @len bytes. */
static inline int fuzz_terminated(const char *s, size_t len)
{
	return memchr(s, '\0', len) != NULL;
}

#endif
