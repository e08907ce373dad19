/* SPDX-License-Identifier: MIT */
/*
 * Soak and fault runs over the default (TCP) transport; see README.md here.
 *
 *   zap-soak [--faults] [--seconds S] [--procs P] [--eps E] [--max-size B]
 *            [--deadline-ms MS]
 *
 * P worker processes (default 8) each open E endpoints (default 8: 64 in
 * all) on their own loopback address (127.x.y.p+1), and every endpoint
 * sends messages of random size (1 B to --max-size, 4 MiB by default,
 * mostly small) to random endpoints, itself included, while a receiver
 * thread checks each message it gets:
 *
 *  - a 32-byte header (shorter messages carry its first bytes): sequence
 *    number per (sender incarnation, receiver), sender, receiver,
 *    incarnation, length, magic, and a checksum of the body; the body is a
 *    pseudo-random stream seeded by the header, compared byte for byte;
 *  - per sender incarnation, sequence numbers arrive exactly in order:
 *    nothing lost, duplicated or reordered;
 *  - at the end (after a last sweep in which every endpoint sends one
 *    message to every other), the last sequence number each receiver got
 *    from each sender is the last one that sender was told was sent, and
 *    for pairs whose processes were never killed every message arrived,
 *    from the first;
 *  - each worker samples VmRSS and its open descriptors every 100 ms; the
 *    peaks must stay under ceilings (and RSS must not keep growing).
 *
 * --faults: workers in the upper half are SIGKILLed at random and restarted
 * on the same addresses (a new incarnation). What the wire guarantees, and
 * what is checked:
 *  - survivors (never-killed processes) keep talking without loss and
 *    without a single failed send between them;
 *  - a send to a dead peer returns within its deadline (ctx, 20 s) with an
 *    error (ECONNREFUSED once the death is known; ECONNRESET/EPIPE when the
 *    connection breaks under the send; ETIMEDOUT at the deadline);
 *  - zap_send() returning 0 means the kernel took the bytes, not that the
 *    peer read them: a send in the short window before the peer's death
 *    is noticed (its FIN/RST read) can succeed and the message is lost with
 *    the peer. The test measures that window (from the moment the killed
 *    process is reaped) and requires it to be bounded (5 s; ~1 s seen on
 *    a loaded host, where the kernel closes a killed process's sockets a
 *    little after it is reaped), i.e. no silent success "forever";
 *  - messages a killed peer had not read are lost with it; its restarted
 *    incarnation receives from every sender again (checked at the end).
 *
 * Environment: ZAP_SOAK_SECONDS overrides --seconds (run it for hours:
 * ZAP_SOAK_SECONDS=3600 build/tests/soak/zap-soak --faults).
 * Exit: 0 pass, 1 a check failed, 2 usage or setup error.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zap/zap.h>

#include "soak-common.h"

#define HDR 32
#define HDR_THROUGH_INC 16 /* a header's first bytes up to the incarnation */
#define MAGIC 0x4b414f53u /* "SOAK" */
#define MAX_PROCS 32
#define MAX_EPS 256
#define INC_SLOTS 8


/* Ceilings per worker process (see README.md for the figures they cover). */
#define RSS_CEILING_KB (768u * 1024u)
#define RSS_GROWTH_KB (192u * 1024u)

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifdef UNDER_ASAN
/* Freed messages sit in ASan's quarantine; keep it small so that RSS
 * still says something about the library. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "quarantine_size_mb=32";
}
#endif

/*
 * Every send has this deadline. Generous: 64 endpoints on a couple of
 * shared cores saturate them, and a 4 MiB message then takes seconds.
 */
#ifdef UNDER_ASAN
#define SEND_DEADLINE_DEFAULT_NS (60ull * 1000000000ull)
#else
#define SEND_DEADLINE_DEFAULT_NS (20ull * 1000000000ull)
#endif
#define SEND_DEADLINE_NS (sh->deadline_ns)

/*
 * How long after its process was reaped a dead peer may still take sends.
 * Not zero: the kernel may release a killed process's sockets a little
 * after the parent reaps it (deferred close, seen up to ~1 s on a loaded
 * host), and our endpoint must then read the FIN/RST. Bounded, not
 * "forever".
 */
#define SILENT_MAX_NS (zt_timeout_ms(5000) * 1000000ull)

enum { PH_SETUP, PH_RUN, PH_SWEEP, PH_STOP };

struct ep_sh {
	char addr[64];
	_Atomic uint32_t inc;        /* incarnation, set before (re)start */
	atomic_int alive;            /* up and listening */
	_Atomic uint64_t dead_since; /* ns: when it was killed (0: alive) */
	_Atomic uint64_t up_since;
};

/* [src][dst], written by the sender. */
struct tx_sh {
	uint64_t next_seq; /* successful sends of this incarnation */
	uint64_t bytes;
	/* The last taken send, for the report when its message is missing:
	 * when (ns since t0), its length, the receiver incarnation it was
	 * meant for and whether that one was up when it started. */
	uint64_t last_ns, last_len;
	uint32_t last_inc;
	int last_alive;
};

/* [dst][src], written by the receiver: the newest sender incarnation seen. */
struct rx_sh {
	uint32_t inc;
	int synced;
	uint64_t first, next, count;
};

struct proc_sh {
	pid_t pid;
	atomic_int ready;
	atomic_int sweep_done;
	int kills;
	bool killable;
	_Atomic uint64_t peak_rss_kb, peak_fds, rss_warm_kb, rss_end_kb, fds_end;
};

struct shared {
	int nprocs, eps, n, faults;
	uint64_t max_size, t0, seconds, deadline_ns;
	atomic_int phase;
	atomic_int failures;
	_Atomic uint64_t msgs, bytes, unverified, resyncs, tiny;
	_Atomic uint64_t sends, send_errs, err_code[8], dead_sends, dead_errs;
	_Atomic uint64_t silent_dead, max_silent_ns, max_fail_ns, max_send_ns;
	_Atomic uint64_t live_errs, silent_hist[3];
	struct proc_sh procs[MAX_PROCS];
	struct ep_sh ep[MAX_EPS];
	/* followed by tx[n][n] and rx[n][n] */
};

static struct shared *sh;
static struct tx_sh *tx_tab;
static struct rx_sh *rx_tab;

static const int err_codes[8] = { ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT,
				  EHOSTUNREACH, ECANCELED, ESHUTDOWN, 0 };
static const char *const err_names[8] = { "ECONNREFUSED", "ECONNRESET", "EPIPE",
					  "ETIMEDOUT", "EHOSTUNREACH", "ECANCELED",
					  "ESHUTDOWN", "other" };

static void amax(_Atomic uint64_t *a, uint64_t v)
{
	uint64_t o = atomic_load(a);
	while (v > o && !atomic_compare_exchange_weak(a, &o, v))
		;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	int n = atomic_fetch_add(&sh->failures, 1);

	if (n >= 20)
		return;
	fprintf(stderr, "FAIL [pid %d]: ", (int)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ------------------------------------------------------------------------ */
/* Message format                                                            */
/* ------------------------------------------------------------------------ */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/*
 * Generate (or, with @check, compare against) the body of a message: a
 * stream seeded by the header. Returns the body checksum; with @check,
 * *@bad is set at the first differing byte.
 */
static uint64_t body(unsigned char *out, const unsigned char *check, size_t len,
		     uint64_t seed, bool *bad)
{
	uint64_t s = mix(seed) | 1, csum = 0xcbf29ce484222325ull;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		if (check) {
			uint64_t w;
			memcpy(&w, check + i, 8);
			if (w != s && !*bad)
				*bad = true;
		} else {
			memcpy(out + i, &s, 8);
		}
		csum = (csum ^ s) * 0x100000001b3ull;
	}
	if (i < len) {
		unsigned char t[8];
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		memcpy(t, &s, 8);
		for (size_t k = 0; i + k < len; k++) {
			if (check) {
				if (check[i + k] != t[k])
					*bad = true;
			} else {
				out[i + k] = t[k];
			}
			csum = (csum ^ t[k]) * 0x100000001b3ull;
		}
	}
	return csum;
}

static uint64_t seed_of(unsigned src, unsigned dst, uint32_t inc, uint64_t seq)
{
	return mix(((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^ inc) ^ mix(seq + 1);
}

/* The header: seq u64 | src u16 | dst u16 | inc u32 | len u32 | magic u32 |
 * body checksum u64, little-endian (so a 1-byte message holds seq's low
 * byte). */
static void hdr_make(unsigned char *h, unsigned src, unsigned dst, uint32_t inc,
		     uint64_t seq, uint32_t len, uint64_t csum)
{
	put_le(h, seq, 8);
	put_le(h + 8, src, 2);
	put_le(h + 10, dst, 2);
	put_le(h + 12, inc, 4);
	put_le(h + 16, len, 4);
	put_le(h + 20, MAGIC, 4);
	put_le(h + 24, csum, 8);
}

static size_t msg_build(unsigned char *buf, size_t len, unsigned src,
			unsigned dst, uint32_t inc, uint64_t seq)
{
	unsigned char h[HDR];
	uint64_t csum = 0;

	if (len > HDR)
		csum = body(buf + HDR, NULL, len - HDR, seed_of(src, dst, inc, seq), NULL);
	else
		csum = body(NULL, NULL, 0, 0, NULL);
	hdr_make(h, src, dst, inc, seq, (uint32_t)len, csum);
	memcpy(buf, h, len < HDR ? len : HDR);
	return len;
}

static size_t pick_size(uint64_t *rng)
{
	uint64_t r = mix(++*rng);
	unsigned k = (unsigned)(r % 1000);
	uint64_t v = r >> 16;
	size_t len;

	/* Mostly small: 80% up to 1 KiB, 18% up to 64 KiB, 1.8% up to 1 MiB,
	 * 0.2% up to 4 MiB (about 20 KiB on average). */
	if (k < 800)
		len = 1 + v % 1024;
	else if (k < 980)
		len = 1024 + v % (63 * 1024);
	else if (k < 998)
		len = (64 << 10) + v % ((1 << 20) - (64 << 10));
	else
		len = (1 << 20) + v % ((4u << 20) - (1 << 20) + 1);
	if (len > sh->max_size)
		len = 1 + v % sh->max_size;
	return len;
}

/* ------------------------------------------------------------------------ */
/* Worker process                                                            */
/* ------------------------------------------------------------------------ */

struct rx_state {
	uint32_t inc;
	bool used;
	uint64_t first, next, count;
};

struct ep_local {
	unsigned idx;
	uint32_t inc;
	struct zap_transport *t;
	pthread_t rx_th, tx_th;
	/* receiver: per source, the last INC_SLOTS incarnations */
	struct rx_state (*rx)[INC_SLOTS];
	uint32_t *newest; /* per source: newest incarnation seen + 1 (0: none) */
	/* sender */
	uint32_t *seen_inc;
	bool *need_full;
};

static int find_src(const char *peer)
{
	for (int i = 0; i < sh->n; i++)
		if (!strcmp(sh->ep[i].addr, peer))
			return i;
	return -1;
}

static void rx_publish(struct ep_local *e, unsigned src, const struct rx_state *s)
{
	struct rx_sh *r = &rx_tab[(size_t)e->idx * sh->n + src];
	r->inc = s->inc;
	r->synced = 1;
	r->first = s->first;
	r->next = s->next;
	r->count = s->count;
}

static void verify(struct ep_local *e, struct zap_msg *m)
{
	const unsigned char *d = zap_msg_data(m);
	size_t len = zap_msg_len(m);
	int src = find_src(zap_msg_peer(m));
	unsigned me = e->idx;

	atomic_fetch_add(&sh->msgs, 1);
	atomic_fetch_add(&sh->bytes, len);
	if (src < 0) {
		fail("ep %u: message from unknown peer %s", me, zap_msg_peer(m));
		return;
	}
	struct rx_state *slots = e->rx[src];
	if (len >= HDR) {
		uint64_t seq = get_le(d, 8);
		unsigned hsrc = (unsigned)get_le(d + 8, 2), hdst = (unsigned)get_le(d + 10, 2);
		uint32_t inc = (uint32_t)get_le(d + 12, 4);
		uint32_t hlen = (uint32_t)get_le(d + 16, 4);
		bool bad = false;

		if (get_le(d + 20, 4) != MAGIC || hsrc != (unsigned)src || hdst != me ||
		    hlen != len) {
			fail("ep %u: bad header from %d (%s): src %u dst %u len %u/%zu",
			     me, src, zap_msg_peer(m), hsrc, hdst, hlen, len);
			return;
		}
		uint64_t csum = body(NULL, d + HDR, len - HDR,
				     seed_of((unsigned)src, me, inc, seq), &bad);
		if (bad || csum != get_le(d + 24, 8)) {
			fail("ep %u: corrupt body from %d seq %" PRIu64 " (%zu bytes)",
			     me, src, seq, len);
			return;
		}
		struct rx_state *s = &slots[inc % INC_SLOTS];
		if (!s->used || s->inc != inc) {
			if (e->newest[src] && inc + 1 < e->newest[src] && !sh->faults)
				fail("ep %u: incarnation %u from %d after %u", me, inc,
				     src, e->newest[src] - 1);
			if (!sh->faults && seq != 0)
				fail("ep %u: first message from %d has seq %" PRIu64
				     " (lost the ones before)", me, src, seq);
			if (e->newest[src])
				atomic_fetch_add(&sh->resyncs, 1);
			*s = (struct rx_state){.inc = inc, .used = true, .first = seq,
					       .next = seq + 1, .count = 1};
		} else if (seq != s->next) {
			fail("ep %u: from %d inc %u: seq %" PRIu64 ", expected %" PRIu64
			     " (%s)", me, src, inc, seq, s->next,
			     seq > s->next ? "lost" : "duplicated or reordered");
			s->next = seq + 1;
			return;
		} else {
			s->next++;
			s->count++;
		}
		if (inc + 1 >= e->newest[src]) {
			e->newest[src] = inc + 1;
			rx_publish(e, (unsigned)src, s);
		}
		return;
	}

	/* Shorter than a header: it is the head of the header the next
	 * message of the sender's newest incarnation would have. */
	atomic_fetch_add(&sh->tiny, 1);
	if (!e->newest[src]) {
		atomic_fetch_add(&sh->unverified, 1);
		if (!sh->faults)
			fail("ep %u: %zu-byte message from %d before any header", me,
			     len, src);
		return;
	}
	struct rx_state *s = &slots[(e->newest[src] - 1) % INC_SLOTS];
	unsigned char h[HDR];
	hdr_make(h, (unsigned)src, me, s->inc, s->next, (uint32_t)len,
		 body(NULL, NULL, 0, 0, NULL));
	if (memcmp(h, d, len) && sh->faults) {
		/*
		 * A killed sender's last messages can arrive after its next
		 * incarnation's first ones (a different connection, still
		 * buffered here). A short message carries no incarnation, so
		 * it must be exactly the next expected one of an older
		 * incarnation of that sender.
		 */
		for (unsigned i = 0; i < INC_SLOTS; i++) {
			struct rx_state *o = &slots[i];

			if (!o->used || o == s)
				continue;
			hdr_make(h, (unsigned)src, me, o->inc, o->next, (uint32_t)len,
				 body(NULL, NULL, 0, 0, NULL));
			if (!memcmp(h, d, len)) {
				o->next++;
				o->count++;
				return;
			}
		}
		hdr_make(h, (unsigned)src, me, s->inc, s->next, (uint32_t)len,
			 body(NULL, NULL, 0, 0, NULL));
	}
	if (memcmp(h, d, len)) {
		fail("ep %u: %zu-byte message from %d inc %u is not seq %" PRIu64
		     " (lost, duplicated, reordered or corrupt)", me, len, src,
		     s->inc, s->next);
		return;
	}
	s->next++;
	s->count++;
	rx_publish(e, (unsigned)src, s);
}

static void *rx_main(void *p)
{
	struct ep_local *e = p;
	struct zap_ctx *ctx;

	if (zap_ctx_new(&ctx)) {
		fail("zap_ctx_new");
		return NULL;
	}
	while (atomic_load(&sh->phase) != PH_STOP) {
		struct zap_msg *m;
		zap_ctx_set_timeout(ctx, 100 * 1000000ull);
		int r = zap_recv(e->t, ctx, &m);
		if (r == -ETIMEDOUT)
			continue;
		if (r) {
			fail("ep %u: zap_recv: %s", e->idx, zap_strerror(r));
			break;
		}
		verify(e, m);
		zap_msg_release(m);
	}
	zap_ctx_free(ctx);
	return NULL;
}

static int err_slot(int r)
{
	for (int i = 0; i < 7; i++)
		if (-r == err_codes[i])
			return i;
	return 7;
}

/* One send to @dst with every outcome accounted for. */
static void send_one(struct ep_local *e, struct zap_ctx *ctx, unsigned char *buf,
		     unsigned dst, size_t len)
{
	struct ep_sh *d = &sh->ep[dst];
	struct tx_sh *tx = &tx_tab[(size_t)e->idx * sh->n + dst];
	uint32_t inc0 = atomic_load(&d->inc);

	if (inc0 != e->seen_inc[dst]) {
		e->seen_inc[dst] = inc0;
		e->need_full[dst] = true;
	}
	/* After anything that may have broken the stream (a new sender or
	 * receiver incarnation, an error), the first message carries a whole
	 * header so that the receiver can (re)synchronise. */
	if (e->need_full[dst] && len < HDR)
		len = HDR;
	/*
	 * With faults, a killed incarnation's last messages can be read after
	 * its successor's first ones, and a message of 1-15 bytes does not
	 * say which incarnation sent it: one that matched the successor's next
	 * sequence number was counted there, and the real one then looked
	 * duplicated, the old one's next lost (seen here). Those sizes are
	 * checked by the runs without faults.
	 */
	else if (sh->faults && len < HDR_THROUGH_INC)
		len = HDR_THROUGH_INC;
	int alive0 = atomic_load(&d->alive);
	msg_build(buf, len, e->idx, dst, e->inc, tx->next_seq);
	zap_ctx_set_timeout(ctx, SEND_DEADLINE_NS);
	uint64_t t0 = zt_now_ns();
	int r = zap_send(e->t, d->addr, buf, len, ctx);
	uint64_t t1 = zt_now_ns();
	uint32_t inc1 = atomic_load(&d->inc);
	int alive1 = atomic_load(&d->alive);
	uint64_t ds = atomic_load(&d->dead_since), up = atomic_load(&d->up_since);
	bool dead = !alive0 || !alive1 || inc0 != inc1;

	atomic_fetch_add(&sh->sends, 1);
	amax(&sh->max_send_ns, t1 - t0);
	if (dead)
		atomic_fetch_add(&sh->dead_sends, 1);
	if (!r) {
		tx->next_seq++;
		tx->bytes += len;
		tx->last_ns = t1 - sh->t0;
		tx->last_len = len;
		tx->last_inc = inc0;
		tx->last_alive = alive0;
		e->need_full[dst] = inc0 != inc1;
		if (!alive1 && inc0 == inc1 && ds && ds < t0) {
			/* Taken by the kernel although the peer was already
			 * killed, and before its next incarnation was started
			 * (the parent bumps inc first): lost with it (see the
			 * top of this file). */
			atomic_fetch_add(&sh->silent_dead, 1);
			amax(&sh->max_silent_ns, t1 - ds);
			atomic_fetch_add(&sh->silent_hist[t1 - ds < 10000000ull ? 0 :
							  t1 - ds < 100000000ull ? 1 : 2], 1);

		}
		return;
	}
	e->need_full[dst] = true;
	atomic_fetch_add(&sh->send_errs, 1);
	atomic_fetch_add(&sh->err_code[err_slot(r)], 1);
	amax(&sh->max_fail_ns, t1 - t0);
	if (dead) {
		atomic_fetch_add(&sh->dead_errs, 1);
		return;
	}
	/* A peer that was up all along (for a second at least) must be
	 * reachable. */
	if (up + 1000000000ull < t0) {
		atomic_fetch_add(&sh->live_errs, 1);
		fail("ep %u -> %u (%s, up): zap_send of %zu bytes: %s", e->idx, dst,
		     d->addr, len, zap_strerror(r));
	}
}

static void *tx_main(void *p)
{
	struct ep_local *e = p;
	unsigned char *buf = malloc(sh->max_size > HDR ? sh->max_size : HDR);
	uint64_t rng = mix(zt_now_ns() ^ ((uint64_t)e->idx << 40) ^ (uint64_t)getpid());
	struct zap_ctx *ctx;

	if (!buf || zap_ctx_new(&ctx)) {
		fail("out of memory");
		free(buf);
		return NULL;
	}
	while (atomic_load(&sh->phase) == PH_RUN) {
		unsigned dst = (unsigned)(mix(++rng) % (uint64_t)sh->n);
		send_one(e, ctx, buf, dst, pick_size(&rng));
	}
	/* The sweep: one message to every endpoint, so that the end check
	 * covers every pair with a message sent after the last restart. */
	for (unsigned dst = 0; dst < (unsigned)sh->n; dst++) {
		bool sent = false;

		/* No kills now, but a connection to an incarnation killed a
		 * moment ago may still be found broken: try again. */
		for (int tries = 0; tries < 50 && !sent; tries++) {
			uint64_t before = tx_tab[(size_t)e->idx * sh->n + dst].next_seq;
			send_one(e, ctx, buf, dst, 1 + mix(++rng) % 200);
			sent = tx_tab[(size_t)e->idx * sh->n + dst].next_seq != before;
			if (!sent)
				usleep(100000);
		}
		/* Else the end check would not cover this pair: say so. */
		if (!sent)
			fail("sweep: %u -> %u: no send taken in 50 tries", e->idx, dst);
	}
	zap_ctx_free(ctx);
	free(buf);
	return NULL;
}

static uint64_t rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t v = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6)) {
			v = strtoull(line + 6, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}


static void quiet_log(enum zap_log_level level, const char *domain,
		      const char *msg, void *user)
{
	/* Expected in fault runs: "dropping connection ... reset". Errors
	 * still print. */
	(void)user;
	if (level <= (getenv("ZAP_SOAK_WARN") ? ZAP_LOG_WARN : ZAP_LOG_ERROR) ||
	    getenv("ZAP_SOAK_DEBUG"))
		fprintf(stderr, "%.6f [%d] zap %s %d: %s\n",
			(double)(int64_t)(zt_now_ns() - sh->t0) / 1e9, (int)getpid(), domain,
			(int)level, msg);
}

static int worker(int p, bool restart)
{
	struct proc_sh *ps = &sh->procs[p];
	struct ep_local *eps = calloc((size_t)sh->eps, sizeof(*eps));
	int rc = 0;

	zap_set_log_handler(quiet_log, NULL);
	for (int k = 0; k < sh->eps; k++) {
		struct ep_local *e = &eps[k];
		unsigned idx = (unsigned)(p * sh->eps + k);
		struct zap_attr a = {.size = sizeof(a), .max_msg_size = 8u << 20};
		char first[64];
		int r = -1;

		e->idx = idx;
		e->inc = atomic_load(&sh->ep[idx].inc);
		e->rx = calloc((size_t)sh->n, sizeof(*e->rx));
		e->newest = calloc((size_t)sh->n, sizeof(*e->newest));
		e->seen_inc = calloc((size_t)sh->n, sizeof(*e->seen_inc));
		e->need_full = calloc((size_t)sh->n, sizeof(*e->need_full));
		if (!e->rx || !e->newest || !e->seen_inc || !e->need_full) {
			fail("out of memory");
			_exit(2);
		}
		for (int i = 0; i < sh->n; i++) {
			e->need_full[i] = true;
			e->seen_inc[i] = UINT32_MAX;
		}
		memset(&tx_tab[(size_t)idx * sh->n], 0, sizeof(*tx_tab) * (size_t)sh->n);
		memset(&rx_tab[(size_t)idx * sh->n], 0, sizeof(*rx_tab) * (size_t)sh->n);
		if (restart) {
			a.listen = sh->ep[idx].addr;
		} else {
			/* Its own loopback address per process: a restart binds
			 * the same port again, and no other socket on this host
			 * uses that address for an outgoing connection. */
			snprintf(first, sizeof(first), "127.%u.%u.%d:0",
				 (unsigned)(sh->t0 >> 20) % 200 + 20,
				 (unsigned)(getppid() % 250) + 1, p + 1);
			a.listen = first;
		}
		/* A restart may find the port briefly taken: retry for 5 s. */
		for (int tries = 0; tries < 100; tries++) {
			r = zap_pick("=default", 0, &a, &e->t);
			if (r != -EADDRINUSE)
				break;
			usleep(50000);
		}
		if (r) {
			fprintf(stderr, "worker %d: zap_pick on %s: %s\n", p, a.listen,
				zap_strerror(r));
			_exit(2);
		}
		if (!restart &&
		    zap_transport_address(e->t, sh->ep[idx].addr, sizeof(sh->ep[idx].addr))) {
			fprintf(stderr, "worker %d: no address\n", p);
			_exit(2);
		}
	}
	atomic_store(&ps->ready, 1);
	while (atomic_load(&sh->phase) == PH_SETUP)
		usleep(1000);

	for (int k = 0; k < sh->eps; k++) {
		pthread_create(&eps[k].rx_th, NULL, rx_main, &eps[k]);
		pthread_create(&eps[k].tx_th, NULL, tx_main, &eps[k]);
	}
	/* Monitor: peaks of RSS and descriptors, every 100 ms. */
	uint64_t warm = sh->t0 + sh->seconds * 1000000000ull / 4;
	bool swept = false;
	while (atomic_load(&sh->phase) != PH_STOP) {
		uint64_t r = rss_kb(), f = fd_count();
		amax(&ps->peak_rss_kb, r);
		amax(&ps->peak_fds, f);
		if (!atomic_load(&ps->rss_warm_kb) && zt_now_ns() >= warm)
			atomic_store(&ps->rss_warm_kb, r);
		if (!swept && atomic_load(&sh->phase) == PH_SWEEP) {
			for (int k = 0; k < sh->eps; k++)
				pthread_join(eps[k].tx_th, NULL);
			swept = true;
			atomic_store(&ps->sweep_done, 1);
		}
		usleep(100000);
	}
	if (!swept)
		for (int k = 0; k < sh->eps; k++)
			pthread_join(eps[k].tx_th, NULL);
	for (int k = 0; k < sh->eps; k++)
		pthread_join(eps[k].rx_th, NULL);
	atomic_store(&ps->rss_end_kb, rss_kb());
	atomic_store(&ps->fds_end, fd_count());
	for (int k = 0; k < sh->eps; k++) {
		zap_close(eps[k].t);
		free(eps[k].rx);
		free(eps[k].newest);
		free(eps[k].seen_inc);
		free(eps[k].need_full);
	}
	free(eps);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Parent                                                                    */
/* ------------------------------------------------------------------------ */

static pid_t spawn(int p, bool restart)
{
	atomic_store(&sh->procs[p].ready, 0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0) {
		int r = worker(p, restart);
		fflush(NULL);
		exit(r);
	}
	sh->procs[p].pid = pid;
	return pid;
}

static bool wait_ready(int p, uint64_t limit_ns)
{
	uint64_t end = zt_now_ns() + limit_ns;
	while (!atomic_load(&sh->procs[p].ready)) {
		int st;
		if (waitpid(sh->procs[p].pid, &st, WNOHANG) == sh->procs[p].pid) {
			fprintf(stderr, "worker %d died during setup (status 0x%x)\n", p, st);
			return false;
		}
		if (zt_now_ns() > end)
			return false;
		usleep(2000);
	}
	return true;
}

static void set_alive(int p, bool alive)
{
	uint64_t t = zt_now_ns();
	for (int k = 0; k < sh->eps; k++) {
		struct ep_sh *e = &sh->ep[p * sh->eps + k];
		if (alive) {
			atomic_store(&e->up_since, t);
			atomic_store(&e->dead_since, 0);
			atomic_store(&e->alive, 1);
		} else {
			/* Dying: SIGKILL is on its way. A loaded process can
			 * take a second to go; its sockets work until then. */
			atomic_store(&e->alive, 0);
		}
	}
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void kill_all(void)
{
	for (int p = 0; p < sh->nprocs; p++)
		if (sh->procs[p].pid > 0)
			kill(sh->procs[p].pid, SIGKILL);
}

/* Whether every pair's tail has arrived (see the end checks). */
static bool drained(bool report)
{
	bool ok = true;
	int shown = 0;

	for (int s = 0; s < sh->n; s++)
		for (int d = 0; d < sh->n; d++) {
			const struct tx_sh *t = &tx_tab[(size_t)s * sh->n + d];
			const struct rx_sh *r = &rx_tab[(size_t)d * sh->n + s];
			uint32_t sinc = atomic_load(&sh->ep[s].inc);
			if (!t->next_seq)
				continue;
			if (!r->synced || r->inc != sinc || r->next != t->next_seq) {
				ok = false;
				if (report && shown++ < 10)
					fail("%d -> %d: sender says %" PRIu64 " sent (inc %u); "
					     "receiver has inc %u, next %" PRIu64 "; the last "
					     "taken send: %" PRIu64 " B at %.3f s to receiver "
					     "inc %u (%s then), which is inc %u up since %.3f s",
					     s, d, t->next_seq, sinc, r->inc, r->next,
					     t->last_len, (double)t->last_ns / 1e9,
					     t->last_inc, t->last_alive ? "up" : "down",
					     atomic_load(&sh->ep[d].inc),
					     (double)(int64_t)(atomic_load(&sh->ep[d].up_since) - sh->t0) / 1e9);
			}
		}
	return ok;
}

static void usage(void)
{
	fprintf(stderr, "usage: zap-soak [--faults] [--seconds S] [--procs P] [--eps E] "
			"[--max-size BYTES] [--deadline-ms MS]\n(ZAP_SOAK_SECONDS overrides --seconds)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int nprocs = 8, eps = 8, faults = 0;
	uint64_t seconds = 20, max_size = 4u << 20, deadline_ms = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--faults"))
			faults = 1;
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--procs") && i + 1 < argc)
			nprocs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--eps") && i + 1 < argc)
			eps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--max-size") && i + 1 < argc)
			max_size = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--deadline-ms") && i + 1 < argc)
			deadline_ms = strtoull(argv[++i], NULL, 10);
		else
			usage();
	}
	if (getenv("ZAP_SOAK_SECONDS") && *getenv("ZAP_SOAK_SECONDS"))
		seconds = strtoull(getenv("ZAP_SOAK_SECONDS"), NULL, 10);
	if (under_valgrind()) {
		printf("soak: under valgrind: 2 processes x 2 endpoints, 6 s, up to 64 KiB\n");
		nprocs = 2;
		eps = 2;
		seconds = 6;
		max_size = 64u << 10;
	}
	if (nprocs < 1 || nprocs > MAX_PROCS || eps < 1 || nprocs * eps > MAX_EPS ||
	    seconds < 4 || max_size < 1 || max_size > (4u << 20) ||
	    (faults && nprocs < 2))
		usage();

	/* Each worker holds up to 3 descriptors per (endpoint, peer). */
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	uint64_t fd_ceiling = (uint64_t)eps * (8 + 3 * (uint64_t)(nprocs * eps)) + 32;
	if (rl.rlim_cur < fd_ceiling + 64) {
		printf("SKIP: RLIMIT_NOFILE is %llu, need %llu\n",
		       (unsigned long long)rl.rlim_cur, (unsigned long long)fd_ceiling + 64);
		return 77;
	}

	int n = nprocs * eps;
	size_t size = sizeof(struct shared) + (size_t)n * n * (sizeof(struct tx_sh) +
							     sizeof(struct rx_sh));
	void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			 -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 2;
	}
	sh = mem;
	tx_tab = (struct tx_sh *)(sh + 1);
	rx_tab = (struct rx_sh *)(tx_tab + (size_t)n * n);
	sh->nprocs = nprocs;
	sh->eps = eps;
	sh->n = n;
	sh->faults = faults;
	sh->max_size = max_size;
	/* The default scaled like every test time limit (tests/README.md). */
	sh->deadline_ns = deadline_ms ? deadline_ms * 1000000ull
				      : SEND_DEADLINE_DEFAULT_NS * zt_timeout_ms(1);
	sh->seconds = seconds;
	sh->t0 = zt_now_ns();
	for (int p = 0; p < nprocs; p++)
		sh->procs[p].killable = faults && p >= nprocs / 2;

	printf("soak: %d processes x %d endpoints, %" PRIu64 " s, messages 1 B..%" PRIu64
	       " B%s\n", nprocs, eps, seconds, max_size,
	       faults ? ", killing and restarting the upper half at random" : "");
	fflush(stdout);
	for (int p = 0; p < nprocs; p++) {
		spawn(p, false);
		if (!wait_ready(p, zt_timeout_ms(20000) * 1000000ull)) {
			fprintf(stderr, "worker %d did not start\n", p);
			kill_all();
			return 2;
		}
		set_alive(p, true);
	}
	sh->t0 = zt_now_ns();
	atomic_store(&sh->phase, PH_RUN);

	uint64_t end = sh->t0 + seconds * 1000000000ull;
	/* Faults until 3 s before the end; then everyone is up (healing). */
	uint64_t fault_end = end - 3000000000ull;
	uint64_t rng = mix(sh->t0);
	unsigned kills = 0;
	uint64_t max_reap = 0;
	while (zt_now_ns() < end) {
		if (!faults) {
			sleep_ns(100000000ull);
			continue;
		}
		sleep_ns(200000000ull + mix(++rng) % 600000000ull);
		if (zt_now_ns() >= fault_end)
			continue;
		int p = nprocs / 2 + (int)(mix(++rng) % (uint64_t)(nprocs - nprocs / 2));
		set_alive(p, false);
		uint64_t tk = zt_now_ns();
		kill(sh->procs[p].pid, SIGKILL);
		waitpid(sh->procs[p].pid, NULL, 0);
		/* Reaped: every socket of it is closed now. */
		uint64_t tr = zt_now_ns();
		for (int k = 0; k < eps; k++)
			atomic_store(&sh->ep[p * eps + k].dead_since, tr);
		if (tr - tk > max_reap)
			max_reap = tr - tk;
		sh->procs[p].kills++;
		kills++;
		/* Dead for 100..900 ms, then a new incarnation on the same
		 * addresses. */
		sleep_ns(100000000ull + mix(++rng) % 800000000ull);
		for (int k = 0; k < eps; k++)
			atomic_fetch_add(&sh->ep[p * eps + k].inc, 1);
		spawn(p, true);
		if (!wait_ready(p, zt_timeout_ms(20000) * 1000000ull)) {
			fail("worker %d did not restart", p);
			kill_all();
			return 1;
		}
		set_alive(p, true);
	}

	/* Sweep, then wait until every pair's last message has arrived. */
	atomic_store(&sh->phase, PH_SWEEP);
	uint64_t limit = zt_now_ns() + zt_timeout_ms(60000) * 1000000ull;
	for (int p = 0; p < nprocs; p++) {
		while (!atomic_load(&sh->procs[p].sweep_done) && zt_now_ns() < limit)
			usleep(10000);
		/* Then its last messages may be missing from the end checks. */
		if (!atomic_load(&sh->procs[p].sweep_done))
			fail("worker %d did not finish the sweep within %u ms", p, zt_timeout_ms(60000));
	}
	uint64_t settle = zt_now_ns() + zt_timeout_ms(15000) * 1000000ull;
	while (!drained(false) && zt_now_ns() < settle)
		usleep(50000);
	atomic_store(&sh->phase, PH_STOP);

	int bad_exit = 0;
	for (int p = 0; p < nprocs; p++) {
		int st;
		waitpid(sh->procs[p].pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "worker %d exited with status 0x%x\n", p, st);
			bad_exit = 1;
		}
	}
	double secs = (double)(zt_now_ns() - sh->t0) / 1e9;

	/* End checks. */
	drained(true);
	uint64_t complete = 0;
	for (int s = 0; s < n; s++)
		for (int d = 0; d < n; d++) {
			if (sh->procs[s / eps].kills || sh->procs[d / eps].kills)
				continue;
			const struct tx_sh *t = &tx_tab[(size_t)s * n + d];
			const struct rx_sh *r = &rx_tab[(size_t)d * n + s];
			if (r->first != 0 || r->count != t->next_seq)
				fail("%d -> %d (never killed): %" PRIu64 " sent, %" PRIu64
				     " received from seq %" PRIu64, s, d, t->next_seq,
				     r->count, r->first);
			else
				complete += r->count;
		}

	uint64_t peak_rss = 0, peak_fds = 0, sum_rss = 0;
	for (int p = 0; p < nprocs; p++) {
		struct proc_sh *ps = &sh->procs[p];
		uint64_t rss = atomic_load(&ps->peak_rss_kb), fds = atomic_load(&ps->peak_fds);
		sum_rss += rss;
		if (rss > peak_rss)
			peak_rss = rss;
		if (fds > peak_fds)
			peak_fds = fds;
		if (rss > RSS_CEILING_KB)
			fail("worker %d: peak RSS %" PRIu64 " KiB above the ceiling %u KiB",
			     p, rss, RSS_CEILING_KB);
		if (fds > fd_ceiling)
			fail("worker %d: %" PRIu64 " open descriptors, ceiling %" PRIu64,
			     p, fds, fd_ceiling);
		if (!ps->kills && ps->rss_warm_kb &&
		    ps->rss_end_kb > ps->rss_warm_kb + RSS_GROWTH_KB)
			fail("worker %d: RSS grew from %" PRIu64 " KiB (a quarter in) to %"
			     PRIu64 " KiB at the end", p, ps->rss_warm_kb, ps->rss_end_kb);
	}

	uint64_t msgs = atomic_load(&sh->msgs), bytes = atomic_load(&sh->bytes);
	printf("soak: %.1f s: %" PRIu64 " messages verified (%" PRIu64 " shorter than a "
	       "header), %.1f MiB; %" PRIu64 " sends, %.0f msg/s, %.1f MiB/s\n",
	       secs, msgs, atomic_load(&sh->tiny), (double)bytes / 1048576.0,
	       atomic_load(&sh->sends), (double)msgs / secs,
	       (double)bytes / 1048576.0 / secs);
	printf("soak: never-killed pairs complete and in order: %" PRIu64 " messages\n",
	       complete);
	printf("soak: peak RSS per worker %" PRIu64 " KiB (ceiling %u), all workers %"
	       PRIu64 " KiB; peak open fds per worker %" PRIu64 " (ceiling %" PRIu64 ")\n",
	       peak_rss, RSS_CEILING_KB, sum_rss, peak_fds, fd_ceiling);
	printf("soak: slowest send %.1f ms\n", (double)atomic_load(&sh->max_send_ns) / 1e6);
	if (faults) {
		printf("faults: sends taken after the peer was reaped: %" PRIu64 " within 10 ms, %"
		       PRIu64 " within 100 ms, %" PRIu64 " later\n", atomic_load(&sh->silent_hist[0]),
		       atomic_load(&sh->silent_hist[1]), atomic_load(&sh->silent_hist[2]));
		printf("faults: %u kills and restarts (SIGKILL to reaped: up to %.1f ms); %" PRIu64 " sends to dead or "
		       "restarting peers, %" PRIu64 " failed (slowest failure %.1f ms, "
		       "deadline %.0f ms)\n", kills, (double)max_reap / 1e6,
		       atomic_load(&sh->dead_sends),
		       atomic_load(&sh->dead_errs),
		       (double)atomic_load(&sh->max_fail_ns) / 1e6,
		       (double)SEND_DEADLINE_NS / 1e6);
		printf("faults: errors:");
		for (int i = 0; i < 8; i++)
			if (atomic_load(&sh->err_code[i]))
				printf(" %s=%" PRIu64, err_names[i], atomic_load(&sh->err_code[i]));
		printf("\nfaults: %" PRIu64 " sends taken by the kernel after the peer was "
		       "reaped (lost with it), at most %.1f ms after; %" PRIu64
		       " resyncs, %" PRIu64 " unverifiable short messages; errors to live "
		       "peers: %" PRIu64 "\n", atomic_load(&sh->silent_dead),
		       (double)atomic_load(&sh->max_silent_ns) / 1e6,
		       atomic_load(&sh->resyncs), atomic_load(&sh->unverified),
		       atomic_load(&sh->live_errs));
		if (!kills)
			fail("no process was killed");
		if (kills && !atomic_load(&sh->dead_errs))
			fail("no send to a dead peer failed");
		if (atomic_load(&sh->max_silent_ns) > SILENT_MAX_NS)
			fail("a send succeeded %.0f ms after its peer was dead",
			     (double)atomic_load(&sh->max_silent_ns) / 1e6);
		if (atomic_load(&sh->unverified) > kills)
			fail("%" PRIu64 " unverifiable messages", atomic_load(&sh->unverified));
	} else if (atomic_load(&sh->send_errs)) {
		fail("%" PRIu64 " sends failed", atomic_load(&sh->send_errs));
	}
	if (atomic_load(&sh->max_send_ns) > SEND_DEADLINE_NS + zt_timeout_ms(1000) * 1000000ull)
		fail("a send took %.0f ms, deadline %.0f ms",
		     (double)atomic_load(&sh->max_send_ns) / 1e6, (double)SEND_DEADLINE_NS / 1e6);
	if (!msgs)
		fail("no message arrived");
	if (!complete)
		fail("no message between never-killed endpoints was checked");
	int failures = atomic_load(&sh->failures);
	printf("%s\n", failures || bad_exit ? "soak: FAILED" : "soak: ok");
	munmap(mem, size);
	return failures || bad_exit ? 1 : 0;
}
