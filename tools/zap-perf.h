/* SPDX-License-Identifier: MIT */
/* What the files of zap-perf share (zap-perf.c, zap-perf-metrics.c). */
#ifndef ZAP_PERF_H
#define ZAP_PERF_H

#include <stdbool.h>
#include <stdio.h>

#include <zap/zap.h>

/*
 * --metrics, client side: ask the server at @peer for its metrics (the
 * control "zperf metrics") and keep them with ours, taken now. An older
 * server that does not answer within a few seconds leaves a comment
 * saying so. Call before "quit".
 */
void perf_metrics_collect(struct zap_transport *t, const char *peer);

/* --metrics, server side: answer a "zperf metrics" from @peer with @t's
 * metrics as one message (a comment when it has none). 0, or -1 when the
 * answer could not be sent. */
int perf_metrics_answer(struct zap_transport *t, const char *peer);

/*
 * Print what perf_metrics_collect() kept to @f as one Prometheus text
 * exposition: each family once, our samples then the server's (their
 * endpoint labels tell them apart). @json: as a JSON string, for the
 * "metrics" member of --json's object.
 */
void perf_metrics_print(FILE *f, bool json);

#endif /* ZAP_PERF_H */
