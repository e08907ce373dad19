/* SPDX-License-Identifier: MIT */
/*
 * A uma endpoint and a default endpoint talk to each other (they share one
 * wire): messages from default land in managed memory on the uma side
 * (device pointer set, bytes intact), replies and sends from a uma pool
 * buffer arrive on the default side. Needs a CUDA device with managed
 * memory. Skips (exit 77, printing the probe's reason) only when the uma
 * plugin loaded and its probe said NOT_PRESENT; a uma plugin that is
 * missing, failed to load or whose probe said ERROR is a failure.
 *
 * Each send runs on a thread of its own while the main thread receives:
 * the wire moves data on its callers' threads, so a message larger than
 * the socket buffers, sent to an endpoint of this same process that no
 * thread is receiving on, would never finish.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zap/zap.h>

#include "zap-test.h"

struct send_job {
	pthread_t th;
	struct zap_transport *t;
	const char *peer;
	const void *buf;
	size_t len;
	int rc;
};

static void *send_main(void *arg)
{
	struct send_job *j = arg;

	j->rc = zap_send(j->t, j->peer, j->buf, j->len, NULL);
	if (j->rc)
		fprintf(stderr, "send of %zu bytes: %s\n", j->len, zap_last_error());
	return NULL;
}

/* Start zap_send() on another thread; send_wait() gives its result. */
static void send_start(struct send_job *j, struct zap_transport *t, const char *peer,
		       const void *buf, size_t len)
{
	*j = (struct send_job){ .t = t, .peer = peer, .buf = buf, .len = len };
	if (pthread_create(&j->th, NULL, send_main, j)) {
		fprintf(stderr, "FAIL: pthread_create\n");
		exit(1);
	}
}

static int send_wait(struct send_job *j)
{
	pthread_join(j->th, NULL);
	return j->rc;
}

/* The payload of message @seed arrived intact. */
static int same(const void *p, size_t n, unsigned seed)
{
	return zt_check_fill(p, n, seed) == n;
}

int main(void)
{
	static const size_t sizes[] = { 0, 1, 4096, 1 << 20, 16 << 20 };
	struct zap_attr attr = { .size = sizeof(attr), .listen = "127.0.0.1:0" };
	struct zap_transport *uma, *def;
	struct zap_caps caps = { .size = sizeof(caps) };
	struct zap_pool_stats st = { .size = sizeof(st) };
	char uma_addr[ZAP_PEER_MAX], def_addr[ZAP_PEER_MAX];
	unsigned char *buf;
	struct zap_buffer *b;
	struct send_job job;
	struct zap_msg *m, *m2;
	int rc;

	rc = zt_need_plugin("uma", "a CUDA device with managed memory");
	if (rc)
		return rc;
	/* Loaded and probed OK: from here every failure is a failure. */
	ZT_CHECK(zap_pick("=uma", 0, &attr, &uma) == 0);
	buf = malloc(16 << 20);
	ZT_CHECK(buf != NULL);
	ZT_CHECK(zap_pick("=default", 0, &attr, &def) == 0);
	ZT_CHECK(zap_transport_address(uma, uma_addr, sizeof(uma_addr)) == 0);
	ZT_CHECK(zap_transport_address(def, def_addr, sizeof(def_addr)) == 0);
	ZT_CHECK(zap_caps(uma, &caps) == 0);
	ZT_CHECK(caps.zero_copy && caps.device_buffers);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		zt_fill(buf, sizes[i], (unsigned)i);
		send_start(&job, def, uma_addr, buf, sizes[i]);
		ZT_CHECK(zap_recv(uma, NULL, &m) == 0);
		ZT_CHECK(send_wait(&job) == 0);
		ZT_CHECK(zap_msg_len(m) == sizes[i]);
		ZT_CHECK(zap_msg_device_ptr(m) != NULL);
		ZT_CHECK(same(zap_msg_data(m), sizes[i], (unsigned)i));
		/* Reply from the received bytes themselves (managed memory). */
		send_start(&job, uma, zap_msg_peer(m), zap_msg_data(m), sizes[i]);
		ZT_CHECK(zap_recv(def, NULL, &m2) == 0);
		ZT_CHECK(send_wait(&job) == 0);
		zap_msg_release(m);
		m = m2;
		ZT_CHECK(zap_msg_len(m) == sizes[i] && same(zap_msg_data(m), sizes[i], (unsigned)i));
		zap_msg_release(m);
	}

	/* A pool buffer, filled by the CPU, sent as is. */
	ZT_CHECK(zap_buffer_alloc(uma, 1 << 20, NULL, &b) == 0);
	ZT_CHECK(zap_buffer_device_ptr(b) != NULL);
	zt_fill(zap_buffer_bytes(b), 1 << 20, 99);
	send_start(&job, uma, def_addr, zap_buffer_bytes(b), 1 << 20);
	ZT_CHECK(zap_recv(def, NULL, &m) == 0);
	ZT_CHECK(send_wait(&job) == 0);
	zap_buffer_release(b);
	zap_buffer_release(b); /* double release: no-op */
	ZT_CHECK(zap_msg_len(m) == 1 << 20 && same(zap_msg_data(m), 1 << 20, 99));
	zap_msg_release(m);

	ZT_CHECK(zap_pool_stats(uma, &st) == 0);
	ZT_CHECK(st.in_use == 0 && st.owned > 0 && st.high_water >= (16 << 20));
	printf("uma pool: owned %llu, high water %llu, allocs %llu\n",
	       (unsigned long long)st.owned, (unsigned long long)st.high_water,
	       (unsigned long long)st.allocs);
	zap_close(uma);
	zap_close(def);
	free(buf);
	printf("uma <-> default: %zu sizes both ways, pool buffer send: ok\n",
	       sizeof(sizes) / sizeof(sizes[0]));
	return 0;
}
