/* SPDX-License-Identifier: MIT */
/*
 * The configuration registry: every ZAP_* variable any part of libzap
 * reads, declared once in config-vars.c with its type, grammar, range,
 * default, setuid policy, owner and doc line. The core reads its own
 * variables through it; plugins and util/ libraries through the host table
 * (zap_host.config_u64, config_str); zap-info --env and the docs check
 * list it. The table is constant; nothing here holds state.
 */
#ifndef ZAP_ZAP_CONFIG_H
#define ZAP_ZAP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum zap_cfg_type {
	ZAP_CFG_BOOL,   /* 1/0, yes/no, true/false, on/off, any case */
	ZAP_CFG_SIZE,   /* bytes: decimal, or with K, M, G or T (powers of 1024) */
	ZAP_CFG_COUNT,  /* plain decimal */
	ZAP_CFG_MS,     /* milliseconds, plain decimal (the name ends _MS) */
	ZAP_CFG_US,     /* microseconds, plain decimal (the name ends _US) */
	ZAP_CFG_OCTAL,  /* 1-4 octal digits (file modes) */
	ZAP_CFG_ENUM,   /* one of @choices, any case; the value is its index */
	ZAP_CFG_STRING, /* taken whole, under @max characters; the owner
	                   checks its syntax and names the variable */
	ZAP_CFG_LIST,   /* a string that holds a list (same rules) */
};

/* What a setuid, setgid or file-capability program (AT_SECURE) does with a
 * variable its caller set. */
enum zap_cfg_secure {
	ZAP_CFG_HONOUR, /* read as anywhere: it cannot widen privileges */
	ZAP_CFG_IGNORE, /* treated as unset (the caller could load code, open
	                   files or sockets of its choosing) */
	ZAP_CFG_REFUSE, /* present: an error, so a setting that cannot be
	                   honoured fails the open instead of degrading */
};

/* Where a value came from. */
enum zap_cfg_source {
	ZAP_CFG_FROM_DEFAULT,
	ZAP_CFG_FROM_ENV,
	ZAP_CFG_FROM_IGNORED, /* set, ignored under AT_SECURE: default used */
	ZAP_CFG_FROM_INVALID, /* set and refused: the reason says why */
};

struct zap_cfg_var {
	const char *name;
	enum zap_cfg_type type;
	enum zap_cfg_secure secure;
	const char *owner;           /* core, tcp, tls, cuda, uma, gpudirect, dpdk */
	uint64_t def, min, max;      /* numbers; strings: max = longest + 1 */
	const char *def_text;        /* the default as the docs say it */
	const char *const *choices;  /* ZAP_CFG_ENUM: NULL-terminated */
	const unsigned char *values; /* ZAP_CFG_ENUM: each choice's value,
	                                or NULL for its index */
	const char *doc;
};

extern const struct zap_cfg_var zap__cfg_vars[];
extern const size_t zap__cfg_nvars;

/* The registry's row for @name, or NULL. */
const struct zap_cfg_var *zap__cfg_find(const char *name);

/* A variable's value as read now. */
struct zap_cfg_val {
	enum zap_cfg_source source;
	uint64_t num;    /* numeric types: the value (the default unless
	                    source is ZAP_CFG_FROM_ENV) */
	const char *str; /* the raw value as set (getenv()'s), or NULL; for
	                    strings and lists the value, NULL when unset,
	                    ignored or refused */
	char why[256];   /* ZAP_CFG_FROM_INVALID: the reason, naming it */
};

/*
 * Read @v's variable now, under its setuid policy. Return 0 (the value or
 * the default in @out), or -EINVAL (malformed or out of range) or -EPERM
 * (present under AT_SECURE where that is refused), with out->why set.
 * Records no error: callers do (zap__fail) or show it (zap-info).
 */
int zap__cfg_get(const struct zap_cfg_var *v, struct zap_cfg_val *out);

/*
 * The grammars, for the unit tests and the fuzz harness: 0, or -EINVAL
 * (not of the grammar), -ERANGE (does not fit 64 bits). Values are taken
 * exactly as set: no sign, no blanks. Counts and durations (whose unit is
 * in the variable's name) are plain decimal; sizes decimal with at most
 * one unit K, M, G or T (any case, powers of 1024).
 */
int zap__cfg_parse_size(const char *s, uint64_t *out);
int zap__cfg_parse_count(const char *s, uint64_t *out);
int zap__cfg_parse_octal(const char *s, uint64_t *out);

/* Plugins' and util/'s view (zap_host.config_u64 and config_str). */
int zap__host_config_u64(const char *name, uint64_t *out);
int zap__host_config_str(const char *name, const char **out);

/* "bool", "size", ...: the type's name for zap-info and docs. */
const char *zap__cfg_type_name(enum zap_cfg_type t);

#endif
