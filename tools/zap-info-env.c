/* SPDX-License-Identifier: MIT */
/*
 * zap-info --env: libzap's configuration registry (zap_env_get()), one
 * line or JSON object per variable: its value and where it came from.
 * No shared state.
 */
#include <stdio.h>
#include <string.h>

#include <zap/zap.h>

#include "zap-info.h"

const char *zi_env_value(const char *name)
{
	size_t n = zap_env_count();

	for (size_t i = 0; i < n; i++) {
		struct zap_env_entry e = { .size = sizeof(e) };

		if (!zap_env_get(i, &e) && !strcmp(e.name, name))
			return e.source == ZAP_ENV_SET ? e.value : NULL;
	}
	return NULL;
}

static const char *const env_sources[] = { "default", "environment", "ignored", "invalid" };

static void print_env_json(const struct zap_env_entry *e, const char *sep)
{
	const char *in = ",\n      ";

	printf("%s    {", sep);
	json_kstr("", "name", e->name);
	json_kstr(in, "type", e->type);
	json_kstr(in, "owner", e->owner);
	json_kstr(in, "default", e->def);
	json_kstr(in, "setuid", e->setuid);
	json_kstr(in, "doc", e->doc);
	json_key(in, "min");
	printf("%llu", (unsigned long long)e->min);
	json_key(in, "max");
	printf("%llu", (unsigned long long)e->max);
	json_key(in, "choices");
	e->choices ? json_str(e->choices) : (void)fputs("null", stdout);
	json_key(in, "value");
	e->value ? json_str(e->value) : (void)fputs("null", stdout);
	json_kstr(in, "source", env_sources[e->source & 3]);
	json_kstr(in, "reason", e->reason);
	fputs("}", stdout);
}

static void print_env_text(const struct zap_env_entry *e, int verbose)
{
	char range[64] = "";

	if (e->source == ZAP_ENV_SET)
		printf("%-30s %s  (environment)\n", e->name, e->value);
	else if (e->source == ZAP_ENV_DEFAULT)
		printf("%-30s %s  (default)\n", e->name, e->def);
	else if (e->source == ZAP_ENV_IGNORED)
		printf("%-30s %s  (ignored under AT_SECURE: '%s'; default)\n", e->name,
		       e->def, e->value);
	else
		printf("%-30s '%s'  (invalid: %s)\n", e->name, e->value, e->reason);
	if (!verbose)
		return;
	if (e->choices)
		snprintf(range, sizeof(range), ": %s", e->choices);
	else if (strcmp(e->type, "string") && strcmp(e->type, "list") &&
		 strcmp(e->type, "bool"))
		snprintf(range, sizeof(range), " %llu..%llu", (unsigned long long)e->min,
			 (unsigned long long)e->max);
	printf("    %s%s, owner %s, setuid: %s; %s\n", e->type, range, e->owner,
	       e->setuid, e->doc);
}

int zi_print_env(int json, int verbose)
{
	size_t n = zap_env_count();
	int bad = 0;

	if (json) {
		fputs("{\n  ", stdout);
		json_kstr("", "version", zap_version());
		fputs(",\n  \"env\": [\n", stdout);
	}
	for (size_t i = 0; i < n; i++) {
		struct zap_env_entry e = { .size = sizeof(e) };

		if (zap_env_get(i, &e))
			return 2;
		bad |= e.source == ZAP_ENV_INVALID;
		if (json)
			print_env_json(&e, i ? ",\n" : "");
		else
			print_env_text(&e, verbose);
	}
	if (json)
		fputs("\n  ]\n}\n", stdout);
	return bad ? 2 : 0; /* EXIT_USAGE */
}

