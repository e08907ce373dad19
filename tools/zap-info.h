/* SPDX-License-Identifier: MIT */
/* What zap-info.c and zap-info-env.c share: the JSON emitter and --env. */
#ifndef ZAP_INFO_H
#define ZAP_INFO_H

/* A JSON string; bytes that are not UTF-8 become U+FFFD. */
void json_str(const char *s);
/* `"key": ` after @sep (", ", ",\n  ...", or "" for the first pair). */
void json_key(const char *sep, const char *key);
void json_kstr(const char *sep, const char *key, const char *v);

/* Variable @name as libzap takes it: its value when set and valid, else
 * NULL (unset, ignored under AT_SECURE, or invalid). */
const char *zi_env_value(const char *name);
/* --env: every variable of the registry, as text or JSON; the exit
 * status, 2 when one is invalid. */
int zi_print_env(int json, int verbose);

#endif
