/* SPDX-License-Identifier: MIT */
/*
 * Replays inputs through one harness without libFuzzer, so that the seed
 * corpus and every regression input run in each normal build (any
 * compiler, any sanitizer setup): replay DIR|FILE...
 * A missing directory is skipped (an empty regression folder is not kept
 * by git). A failing input aborts inside the harness.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static unsigned long runs;

static void run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	size_t len = 0, cap = 0;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			if (!buf)
				abort();
		}
		size_t k = fread(buf + len, 1, cap - len, f);
		if (!k)
			break;
		len += k;
	}
	fclose(f);
	/* An exact-size copy, so that reads past the end are caught by
	 * ASan or valgrind just as under libFuzzer. */
	unsigned char *exact = malloc(len ? len : 1);
	if (!exact)
		abort();
	memcpy(exact, buf, len);
	free(buf);
	fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	runs++;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_path(const char *path)
{
	struct stat st;

	if (stat(path, &st)) {
		fprintf(stderr, "replay: %s: missing, skipped\n", path);
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		run_file(path);
		return;
	}
	DIR *d = opendir(path);
	char **names = NULL;
	size_t n = 0;
	struct dirent *e;

	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		names = realloc(names, (n + 1) * sizeof(*names));
		if (!names || !(names[n] = strdup(e->d_name)))
			abort();
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp);
	for (size_t i = 0; i < n; i++) {
		char p[4096];

		snprintf(p, sizeof(p), "%s/%s", path, names[i]);
		run_file(p);
		free(names[i]);
	}
	free(names);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		run_path(argv[i]);
	printf("replayed %lu inputs\n", runs);
	return 0;
}
