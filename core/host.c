/* SPDX-License-Identifier: MIT */
/* The service table every plugin (and the built-in default) receives. */
#include "zap-config.h"
#include "zap-private.h"

const struct zap_host zap__host = {
	.size = sizeof(struct zap_host),
	.abi_major = ZAP_PLUGIN_ABI_MAJOR,
	.abi_minor = ZAP_PLUGIN_ABI_MINOR,
	.log = zap__log,
	.log_enabled = zap__log_enabled,
	.fail = zap__fail,
	.ctx_fd = zap__ctx_fd,
	.ctx_timeout_ms = zap__ctx_timeout_ms,
	.ctx_err = zap_ctx_err,
	.env_bytes = zap__host_env_bytes,
	.pool_new = zap__pool_new,
	.pool_alloc = zap__pool_alloc,
	.pool_stats = zap__pool_stats,
	.pool_close = zap__pool_close,
	/* ABI 1.1 */
	.pool_try_alloc = zap__pool_try_alloc,
	.last_error = zap_last_error,
	.env_get = zap__env_get,
	/* ABI 1.4 */
	.config_u64 = zap__host_config_u64,
	.config_str = zap__host_config_str,
};
