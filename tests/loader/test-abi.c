/* SPDX-License-Identifier: MIT */
/*
 * ABI suite:
 *  - libzap.so exports exactly the functions zap.h declares, each of them
 *    covered by core/libzap.map, and nothing else (a symbol that leaks or
 *    goes missing fails the test);
 *  - zap.h and zap-plugin.h compile on their own, together and with a
 *    plugin descriptor, as C11 and as C++11 with -pedantic -Werror;
 *  - every fixture plugin and every plugin built from plugins/ exports its
 *    descriptor symbol and nothing else, and no built plugin has libzap.so
 *    among its DT_NEEDED entries (plugins reach the core only through the
 *    host table).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#if !defined(LIBZAP_PATH) || !defined(LIBZAP_MAP) || !defined(NM_PATH) ||   \
	!defined(CC_CMD) || !defined(CXX_CMD) || !defined(INCLUDE_DIR) ||    \
	!defined(BUILD_ROOT)
#error "tests/loader/meson.build passes the paths this test needs"
#endif

#define MAX_SYMS 512

struct symset {
	int n;
	char *name[MAX_SYMS];
};

static void set_add(struct symset *s, const char *name, size_t len)
{
	int i;

	for (i = 0; i < s->n; i++)
		if (strlen(s->name[i]) == len && !strncmp(s->name[i], name, len))
			return;
	if (s->n == MAX_SYMS)
		fail_msg("too many symbols");
	s->name[s->n++] = strndup(name, len);
}

static int set_has(const struct symset *s, const char *name)
{
	int i;

	for (i = 0; i < s->n; i++)
		if (!strcmp(s->name[i], name))
			return 1;
	return 0;
}

static void set_free(struct symset *s)
{
	while (s->n)
		free(s->name[--s->n]);
}

static char *set_text(const struct symset *s)
{
	static char buf[8192];
	size_t used = 0;
	int i;

	buf[0] = '\0';
	for (i = 0; i < s->n && used < sizeof(buf); i++)
		used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s",
					 i ? " " : "", s->name[i]);
	return buf;
}

/* Run a command; its exit status, and its output (stdout+stderr) in *out. */
static int run_cmd(const char *cmd, char **out)
{
	char full[8192], chunk[4096];
	size_t len = 0, n;
	FILE *p;
	int status;

	snprintf(full, sizeof(full), "%s 2>&1", cmd);
	p = popen(full, "r");
	if (!p)
		fail_msg("popen %s: %s", cmd, strerror(errno));
	*out = calloc(1, 1);
	while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0) {
		*out = realloc(*out, len + n + 1);
		memcpy(*out + len, chunk, n);
		len += n;
		(*out)[len] = '\0';
	}
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/*
 * The defined dynamic symbols of @lib. Version definition entries (type
 * A, e.g. "LIBZAP_0") are skipped; version suffixes ("@@LIBZAP_0") are cut.
 */
static void dynamic_symbols(const char *lib, struct symset *s)
{
	char cmd[PATH_MAX + 64], *out, *line, *save = NULL;

	snprintf(cmd, sizeof(cmd), "'%s' -D --defined-only '%s'", NM_PATH, lib);
	if (run_cmd(cmd, &out) != 0)
		fail_msg("%s failed:\n%s", cmd, out);
	for (line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char addr[64], type[8], name[256];

		if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3)
			continue;
		if (!strcmp(type, "A"))
			continue;
		set_add(s, name, strcspn(name, "@"));
	}
	free(out);
}

/* Strip comments from a linker script in place. */
static void strip_comments(char *t)
{
	char *p;

	while ((p = strstr(t, "/*"))) {
		char *e = strstr(p + 2, "*/");

		if (!e)
			fail_msg("unterminated comment in %s", LIBZAP_MAP);
		memset(p, ' ', (size_t)(e + 2 - p));
	}
	for (p = t; (p = strchr(p, '#'));)
		while (*p && *p != '\n')
			*p++ = ' ';
}

/* Patterns of the map's global: sections. */
static void map_globals(struct symset *s)
{
	char *text = th_slurp(LIBZAP_MAP), *tok, *save = NULL;
	int depth = 0, global = 0;

	if (!text)
		fail_msg("cannot read %s", LIBZAP_MAP);
	strip_comments(text);
	for (tok = strtok_r(text, " \t\r\n;", &save); tok;
	     tok = strtok_r(NULL, " \t\r\n;", &save)) {
		if (!strcmp(tok, "{")) {
			depth++;
			global = 0;
		} else if (!strcmp(tok, "}") || !strcmp(tok, "};")) {
			depth--;
		} else if (!strcmp(tok, "global:")) {
			global = 1;
		} else if (!strcmp(tok, "local:")) {
			global = 0;
		} else if (depth > 0 && global) {
			set_add(s, tok, strlen(tok));
		}
	}
	free(text);
	if (depth != 0)
		fail_msg("unbalanced braces in %s", LIBZAP_MAP);
}

/* Functions zap.h declares with ZAP_EXPORT. */
static void header_exports(struct symset *s)
{
	char *text = th_slurp(INCLUDE_DIR "/zap/zap.h"), *p;

	if (!text)
		fail_msg("cannot read %s/zap/zap.h", INCLUDE_DIR);
	for (p = text; (p = strstr(p, "ZAP_EXPORT")); p += 10) {
		const char *bol = p, *paren, *end, *start;

		while (bol > text && bol[-1] != '\n')
			bol--;
		if (*bol == '#')
			continue; /* the macro's own definition */
		paren = strchr(p, '(');
		if (!paren)
			break;
		end = paren;
		while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		start = end;
		while (start > p && (start[-1] == '_' ||
				     (start[-1] >= 'a' && start[-1] <= 'z') ||
				     (start[-1] >= '0' && start[-1] <= '9')))
			start--;
		set_add(s, start, (size_t)(end - start));
	}
	free(text);
}

static int matches_any(const struct symset *patterns, const char *name)
{
	int i;

	for (i = 0; i < patterns->n; i++)
		if (!fnmatch(patterns->name[i], name, 0))
			return 1;
	return 0;
}

static void test_exports(void **state)
{
	struct symset exported = { 0 }, map = { 0 }, header = { 0 };
	struct symset leaked = { 0 }, missing = { 0 }, unlisted = { 0 };
	int i;

	(void)state;
	dynamic_symbols(LIBZAP_PATH, &exported);
	map_globals(&map);
	header_exports(&header);
	assert_true(header.n >= 30); /* sanity of the header scan */
	assert_true(map.n >= 1);
	/* Calls whose absence an application would only notice at link
	 * time; zap_shutdown() came after the first release. */
	assert_true(set_has(&header, "zap_shutdown"));
	assert_true(set_has(&map, "zap_shutdown"));
	for (i = 0; i < exported.n; i++)
		if (!set_has(&header, exported.name[i]))
			set_add(&leaked, exported.name[i],
				strlen(exported.name[i]));
	for (i = 0; i < header.n; i++)
		if (!set_has(&exported, header.name[i]))
			set_add(&missing, header.name[i],
				strlen(header.name[i]));
	/* A literal name in the map that is not exported: stale map. */
	for (i = 0; i < map.n; i++)
		if (!strpbrk(map.name[i], "*?[") &&
		    !set_has(&exported, map.name[i]))
			set_add(&missing, map.name[i], strlen(map.name[i]));
	for (i = 0; i < exported.n; i++)
		if (!matches_any(&map, exported.name[i]))
			set_add(&unlisted, exported.name[i],
				strlen(exported.name[i]));
	printf("# libzap.so exports %d symbols; zap.h declares %d; map lists "
	       "%d\n", exported.n, header.n, map.n);
	if (leaked.n)
		fail_msg("exported but not declared in zap.h: %s",
			 set_text(&leaked));
	if (missing.n)
		fail_msg("declared/listed but not exported: %s",
			 set_text(&missing));
	if (unlisted.n)
		fail_msg("exported but not in %s: %s", LIBZAP_MAP,
			 set_text(&unlisted));
	set_free(&exported);
	set_free(&map);
	set_free(&header);
}

/* ---- headers ----------------------------------------------------------- */

static const char snippet_api[] =
	"#include <zap/zap.h>\n"
	"#include <zap/zap.h>\n"
	"int use(void);\n"
	"int use(void) { return zap_version() != NULL && ZAP_ENOTAVAIL < 0; }\n";

static const char snippet_plugin[] =
	"#include <zap/zap-plugin.h>\n"
	"#include <zap/zap.h>\n"
	"static enum zap_probe_result p(const struct zap_host *h,\n"
	"                               struct zap_probe_info *i)\n"
	"{ (void)h; (void)i; return ZAP_PROBE_OK; }\n"
	"static int o(const struct zap_host *h, const struct zap_open_args *a,\n"
	"             void **t) { (void)h; (void)a; (void)t; return 0; }\n"
	"static void sd(void *t) { (void)t; }\n"
	"static void de(void *t) { (void)t; }\n"
	"static int se(void *t, const char *peer, const void *b, size_t l,\n"
	"              struct zap_ctx *c)\n"
	"{ (void)t; (void)peer; (void)b; (void)l; (void)c; return 0; }\n"
	"static int re(void *t, struct zap_ctx *c, struct zap_msg **m)\n"
	"{ (void)t; (void)c; (void)m; return 0; }\n"
	"static int ca(void *t, struct zap_caps *c) { (void)t; (void)c; return 0; }\n"
	"static const struct zap_plugin_ops ops = {\n"
	"  sizeof(struct zap_plugin_ops), p, o, sd, de, se, re, ca,\n"
	"  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };\n"
	"ZAP_PLUGIN_EXPORT = { ZAP_PLUGIN_ABI_MAJOR, ZAP_PLUGIN_ABI_MINOR,\n"
	"  sizeof(struct zap_plugin), 1, \"mine\", \"1.0\", &ops };\n"
	"typedef char min_size_ok[ZAP_PLUGIN_MIN_SIZE <= sizeof(struct zap_plugin)\n"
	"                         ? 1 : -1];\n"
	"typedef char ops_size_ok[ZAP_PLUGIN_OPS_MIN_SIZE <=\n"
	"                         sizeof(struct zap_plugin_ops) ? 1 : -1];\n";

static void compile(const char *compiler, const char *flags,
		    const char *file_name, const char *text)
{
	char cmd[8192], *out;
	const char *dir = th_tmpdir();
	char path[PATH_MAX];

	th_write(dir, file_name, text, 0644);
	snprintf(cmd, sizeof(cmd), "%s %s -fsyntax-only -I'%s' '%s'", compiler,
		 flags, INCLUDE_DIR, th_join(path, sizeof(path), dir,
					     file_name));
	if (run_cmd(cmd, &out) != 0)
		fail_msg("%s\n%s", cmd, out);
	printf("# ok: %s\n", cmd);
	free(out);
}

#define C_FLAGS "-std=c11 -pedantic -Werror -Wall -Wextra"
#define CXX_FLAGS "-x c++ -std=c++11 -pedantic -Werror -Wall -Wextra"

/*
 * zap-plugin.pc gives headers only: a plugin links no libzap
 * (zap-plugin.h says `pkg-config --libs zap-plugin` prints nothing).
 */
static void test_plugin_pc(void **state)
{
	char *pc = th_slurp(BUILD_ROOT "/meson-private/zap-plugin.pc");
	const char *libs;

	(void)state;
	if (!pc)
		fail_msg("cannot read %s", BUILD_ROOT "/meson-private/zap-plugin.pc");
	libs = strstr(pc, "\nLibs:");
	if (libs && strcspn(libs + 6, "\n") != strspn(libs + 6, " \t"))
		fail_msg("zap-plugin.pc has a Libs: line:\n%s", pc);
	if (strstr(pc, "-lzap") || !strstr(pc, "plugindir="))
		fail_msg("zap-plugin.pc:\n%s", pc);
	free(pc);
}

static void test_headers_c(void **state)
{
	(void)state;
	compile(CC_CMD, C_FLAGS, "api.c", snippet_api);
	compile(CC_CMD, C_FLAGS, "plugin.c", snippet_plugin);
}

static void test_headers_cxx(void **state)
{
	(void)state;
	if (!CXX_CMD[0])
		fail_msg("no C++ compiler found when configuring (install "
			 "g++): the headers must be checked as C++");
	compile(CXX_CMD, CXX_FLAGS, "api.cc", snippet_api);
	compile(CXX_CMD, CXX_FLAGS, "plugin.cc", snippet_plugin);
}

/* ---- plugins export only their descriptor ------------------------------- */

/*
 * Sanitizer runtimes may add symbols of their own to a module without a
 * version script (ASan's ODR indicators for exported globals); they are
 * not the plugin's doing.
 */
static int sanitizer_symbol(const char *name)
{
	return !strncmp(name, "__odr_asan", 10) ||
	       !strncmp(name, "__asan", 6) || !strncmp(name, "__ubsan", 7);
}

static void check_module(const char *path, const char *want)
{
	struct symset s = { 0 };
	int i, ok = 1;

	dynamic_symbols(path, &s);
	for (i = 0; i < s.n; i++)
		if (!sanitizer_symbol(s.name[i]) &&
		    (!want || strcmp(s.name[i], want) != 0))
			ok = 0;
	if (want && !set_has(&s, want))
		ok = 0;
	if (!ok)
		fail_msg("%s exports [%s], expected [%s]", path, set_text(&s),
			 want ? want : "");
	set_free(&s);
}

static void test_fixture_exports(void **state)
{
	static const struct {
		const char *name, *symbol;
	} fixtures[] = {
		{ "good", "zap_plugin_v1" },      { "better", "zap_plugin_v1" },
		{ "top", "zap_plugin_v1" },       { "absent", "zap_plugin_v1" },
		{ "broken", "zap_plugin_v1" },    { "abi2", "zap_plugin_v1" },
		{ "abi2sym", "zap_plugin_v2" },   { "shortdesc", "zap_plugin_v1" },
		{ "shortops", "zap_plugin_v1" },  { "norecv", "zap_plugin_v1" },
		{ "nosym", NULL },                { "misnamed", "zap_plugin_v1" },
		{ "crash", "zap_plugin_v1" },     { "hang", "zap_plugin_v1" },
	};
	char path[PATH_MAX];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++) {
		snprintf(path, sizeof(path), "%s/libzap-%s.so", FIXTURE_DIR,
			 fixtures[i].name);
		if (access(path, R_OK) != 0)
			snprintf(path, sizeof(path), "%s/libzap-%s.so",
				 FIXTURE_ISOLATE_DIR, fixtures[i].name);
		if (access(path, R_OK) != 0)
			fail_msg("fixture libzap-%s.so is not built",
				 fixtures[i].name);
		check_module(path, fixtures[i].symbol);
	}
}

static void check_build_plugin(const char *dir, const char *path,
			       const char *name, void *arg)
{
	(void)dir;
	(void)name;
	(void)arg;
	check_module(path, "zap_plugin_v1");
}

static void test_plugin_exports(void **state)
{
	int n;

	(void)state;
	n = th_each_build_plugin(check_build_plugin, NULL);
	printf("# %d plugin module(s) under %s/plugins checked\n", n,
	       BUILD_ROOT);
}

/*
 * A plugin needs zap-plugin.h, not the library: everything from the core
 * comes through the host table. Read DT_NEEDED straight from the ELF file
 * (64-bit, as built here) so that no tool's output format is involved.
 */
static int needs_libzap(const char *path)
{
	struct stat st;
	const unsigned char *img;
	const Elf64_Ehdr *eh;
	const Elf64_Shdr *sh;
	int fd = open(path, O_RDONLY | O_CLOEXEC), found = 0;

	if (fd < 0 || fstat(fd, &st) || (size_t)st.st_size < sizeof(*eh))
		fail_msg("cannot read %s", path);
	img = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (img == MAP_FAILED)
		fail_msg("cannot map %s", path);
	eh = (const Elf64_Ehdr *)img;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(*sh) > (uint64_t)st.st_size)
		fail_msg("%s is not a 64-bit ELF file this test can read", path);
	sh = (const Elf64_Shdr *)(img + eh->e_shoff);
	for (int i = 0; i < eh->e_shnum; i++) {
		const Elf64_Dyn *d = (const Elf64_Dyn *)(img + sh[i].sh_offset);
		const char *strtab;

		if (sh[i].sh_type != SHT_DYNAMIC || sh[i].sh_link >= eh->e_shnum)
			continue;
		strtab = (const char *)img + sh[sh[i].sh_link].sh_offset;
		for (; (const unsigned char *)(d + 1) <= img + sh[i].sh_offset + sh[i].sh_size &&
		       d->d_tag != DT_NULL; d++)
			if (d->d_tag == DT_NEEDED && !strncmp(strtab + d->d_un.d_val, "libzap.so", 9)) {
				printf("# %s NEEDs %s\n", path, strtab + d->d_un.d_val);
				found = 1;
			}
	}
	munmap((void *)img, (size_t)st.st_size);
	return found;
}

static void check_not_needed(const char *dir, const char *path, const char *name,
			     void *arg)
{
	int *bad = arg;

	(void)dir;
	(void)name;
	*bad += needs_libzap(path);
}

static void test_plugins_need_no_libzap(void **state)
{
	int bad = 0, n;

	(void)state;
	n = th_each_build_plugin(check_not_needed, &bad);
	printf("# %d plugin module(s) checked for DT_NEEDED libzap.so\n", n);
	if (bad)
		fail_msg("%d plugin(s) link libzap.so; use the host table instead", bad);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exports),
		cmocka_unit_test(test_plugin_pc),
		cmocka_unit_test(test_headers_c),
		cmocka_unit_test(test_headers_cxx),
		cmocka_unit_test(test_fixture_exports),
		cmocka_unit_test(test_plugin_exports),
		cmocka_unit_test(test_plugins_need_no_libzap),
	};

	return cmocka_run_group_tests_name("abi", tests, th_group_setup,
					   th_group_teardown);
}
