/* SPDX-License-Identifier: MIT */
/*
 * Plugin descriptor validation (core/loader.c zap__validate()), the check
 * that runs on a plugin's exported bytes before any plugin code.
 *
 * Input: symbol size (2 bytes), expected name length (1), ops table
 * allocation (2), then the descriptor bytes, the expected file name and
 * the ops table bytes. The descriptor lives in a heap block of exactly
 * the symbol's size, and the ops table in one of exactly the size it
 * declares (at least its size field), so that reading a byte more than
 * the ELF symbol or the declared table holds is caught by ASan. The ops
 * pointer is the harness's table; every non-NULL op points at a trap,
 * since validation must never call plugin code.
 */
#include <stddef.h>

#include "fuzz.h"
#include "zap-private.h"

static void trap(void)
{
	fprintf(stderr, "zap__validate called a plugin op\n");
	abort();
}

static size_t take(const uint8_t **d, size_t *n, size_t want, uint8_t *dst)
{
	size_t k = want < *n ? want : *n;

	memset(dst, 0, want);
	memcpy(dst, *d, k);
	*d += k;
	*n -= k;
	return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t hdr[5];
	char why[256], expect[ZAP_NAME_MAX + 8];
	const size_t maxsym = sizeof(struct zap_plugin) + 64;

	if (size < sizeof(hdr))
		return 0;
	take(&data, &size, sizeof(hdr), hdr);
	size_t symsize = ((size_t)hdr[0] << 8 | hdr[1]) % (maxsym + 1);
	size_t elen = hdr[2] % (sizeof(expect) - 1);
	unsigned opsflags = hdr[3];

	/* The descriptor: exactly @symsize bytes. */
	uint8_t *desc = malloc(symsize ? symsize : 1);
	if (!desc)
		abort();
	take(&data, &size, symsize, desc);
	take(&data, &size, elen, (uint8_t *)expect);
	expect[elen] = '\0';

	/* The ops table, as large as its own size field says (bounded). */
	struct zap_plugin_ops *ops = NULL;
	uint8_t raw[sizeof(struct zap_plugin_ops) + 64];
	take(&data, &size, sizeof(raw), raw);
	size_t declared;
	memcpy(&declared, raw, sizeof(declared));
	declared %= sizeof(raw) + 1;
	if (declared < sizeof(size_t))
		declared = sizeof(size_t);
	memcpy(raw, &declared, sizeof(declared));
	/* Op slots: NULL or the trap, per byte of the input. */
	for (size_t off = sizeof(size_t); off + sizeof(void *) <= declared;
	     off += sizeof(void *)) {
		void (*fn)(void) = raw[off] & 1 ? trap : NULL;
		memcpy(raw + off, &fn, sizeof(fn));
	}
	ops = malloc(declared);
	if (!ops)
		abort();
	memcpy(ops, raw, declared);

	/* The ops pointer, where the descriptor is long enough to hold it. */
	if (symsize >= offsetof(struct zap_plugin, ops) + sizeof(void *)) {
		const struct zap_plugin_ops *p = (opsflags & 3) ? ops : NULL;
		memcpy(desc + offsetof(struct zap_plugin, ops), &p, sizeof(p));
	}

	memset(why, 'x', sizeof(why));
	why[sizeof(why) - 1] = '\0';
	enum zap_plugin_state st = zap__validate((const struct zap_plugin *)desc,
						 symsize, expect, why, sizeof(why));
	FUZZ_CHECK(fuzz_terminated(why, sizeof(why)));
	FUZZ_CHECK(st == ZAP_PLUGIN_LOADED || st == ZAP_PLUGIN_INVALID ||
		   st == ZAP_PLUGIN_ABI_MISMATCH);
	if (st == ZAP_PLUGIN_LOADED) {
		const struct zap_plugin *d = (const struct zap_plugin *)desc;

		FUZZ_CHECK(symsize >= ZAP_PLUGIN_MIN_SIZE);
		FUZZ_CHECK(d->abi_major == ZAP_PLUGIN_ABI_MAJOR);
		FUZZ_CHECK(d->size >= ZAP_PLUGIN_MIN_SIZE && d->size <= symsize);
		FUZZ_CHECK(fuzz_terminated(d->name, sizeof(d->name)));
		FUZZ_CHECK(fuzz_terminated(d->version, sizeof(d->version)));
		FUZZ_CHECK(!strcmp(d->name, expect));
		FUZZ_CHECK(d->ops == ops);
		FUZZ_CHECK(ops->size >= ZAP_PLUGIN_OPS_MIN_SIZE);
		FUZZ_CHECK(ops->probe && ops->open && ops->shutdown &&
			   ops->destroy && ops->send && ops->recv && ops->caps);
	} else {
		FUZZ_CHECK(why[0] && why[0] != 'x');
	}
	free(ops);
	free(desc);
	return 0;
}
