/* SPDX-License-Identifier: MIT */
/* Shared by zap-soak and zap-flood. */
#ifndef ZAP_SOAK_COMMON_H
#define ZAP_SOAK_COMMON_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* valgrind (meson test --setup valgrind) is ~50x slower and cannot keep
 * up with a flood: the programs then run small. */
static inline bool under_valgrind(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	bool v = false;

	if (!f)
		return false;
	while (!v && fgets(line, sizeof(line), f))
		v = strstr(line, "vgpreload") != NULL;
	fclose(f);
	return v;
}

#endif
