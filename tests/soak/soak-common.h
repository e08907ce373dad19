/* SPDX-License-Identifier: MIT */
/* Shared by zap-soak and zap-flood. */
#ifndef ZAP_SOAK_COMMON_H
#define ZAP_SOAK_COMMON_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "zap-test.h"

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

/* Open descriptors of this process, from /proc/self/fd; 0 if unreadable. */
static inline uint64_t fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	uint64_t n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

#endif
