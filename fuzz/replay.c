/* SPDX-License-Identifier: MIT */
/*
 * Replays inputs through one harness without libFuzzer, so that the seed
 * corpus and every regression input run in each normal build (any
 * compiler, any sanitizer setup):
 *
 *   replay CORPUS [REGRESSIONS...]
 *
 * CORPUS (a directory, or one input file) must exist and hold at least
 * one input: a corpus that is missing, empty or unreadable is an error
 * (exit 1), so a renamed or lost corpus cannot make the test pass having
 * replayed nothing. Each REGRESSIONS path may be missing: git keeps no
 * empty directory, and most harnesses have no regression input yet
 * (fuzz/README.md); one that exists is replayed in full, and any input in
 * it that cannot be read is an error. A failing input aborts inside the
 * harness.
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
	if (ferror(f)) { /* a directory or an I/O error: not an empty input */
		fprintf(stderr, "replay: %s: cannot read: %s\n", path, strerror(errno));
		exit(1);
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

/* Replay the file @path or every input in the directory @path; return how
 * many inputs that was. A missing @path is an error unless @optional. */
static unsigned long run_path(const char *path, int optional)
{
	unsigned long before = runs;
	struct stat st;

	if (stat(path, &st)) {
		if (optional && errno == ENOENT) {
			fprintf(stderr, "replay: %s: none (no regression inputs)\n", path);
			return 0;
		}
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	if (!S_ISDIR(st.st_mode)) {
		run_file(path);
		return runs - before;
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
	return runs - before;
}

int main(int argc, char **argv)
{
	unsigned long corpus;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS [REGRESSIONS...]\n", argv[0]);
		return 2;
	}
	corpus = run_path(argv[1], 0);
	if (!corpus) {
		fprintf(stderr, "replay: %s: the corpus holds no input\n", argv[1]);
		return 1;
	}
	for (int i = 2; i < argc; i++)
		run_path(argv[i], 1);
	printf("replayed %lu inputs (%lu from the corpus)\n", runs, corpus);
	return 0;
}
