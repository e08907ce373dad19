/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers for the loader, pick, abi and zap-info suites.
 *
 * libzap scans plugins and reads ZAP_TRANSPORT once per process, so every
 * scenario runs in a forked child: the parent (the cmocka runner) prepares
 * a temporary plugin directory, th_child() forks, the child sets its
 * environment, calls libzap and checks results with the TH_CHECK macros,
 * which report the first failure through a pipe and _exit(1). The parent
 * turns that into a cmocka failure. The parent never calls libzap itself.
 */
#ifndef ZAP_TESTS_HARNESS_H
#define ZAP_TESTS_HARNESS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include <zap/zap.h>

#define TH_STR_(x) #x
#define TH_STR(x) TH_STR_(x)

/* ---- parent side ------------------------------------------------------ */

/** Group setup/teardown: create and remove the root temporary directory. */
int th_group_setup(void **state);
int th_group_teardown(void **state);

/**
 * The probe time limit every scenario gets by default (ZAP_PROBE_TIMEOUT_MS,
 * set by th_group_setup()): TH_PROBE_LIMIT_MS scaled by
 * ZAP_TEST_TIMEOUT_SCALE, as a string for a command line.
 */
#define TH_PROBE_LIMIT_MS 30000
const char *th_probe_limit_ms(void);

/** A fresh empty directory (mode 0755) under the root; valid until teardown. */
const char *th_tmpdir(void);

/**
 * Copy fixture libzap-@fixture.so into @dir as @as (NULL: same file name).
 * Returns the new file's path (static storage per call: copy it if needed).
 */
const char *th_fixture(const char *dir, const char *fixture, const char *as);

/**
 * A fresh directory holding a copy (mode 0755) of the file at @path, under
 * the same name: a build-tree plugin run from a directory with safe modes
 * whatever the modes above the build tree are.
 */
const char *th_private_copy(const char *path);

/**
 * A fresh directory holding copies of the fixtures named in the
 * NULL-terminated list (libzap-<name>.so each).
 */
const char *th_fixture_dir(const char *const *fixtures);

/**
 * Call @fn for every plugin module built from plugins/ (BUILD_ROOT/
 * plugins/<folder>/libzap-<name>.so) with its folder, file path and
 * <name>. Returns how many there were; fails the current test unless
 * that is BUILT_PLUGINS, the number Meson builds (so a test walking the
 * modules cannot pass having found none, say after they moved).
 */
int th_each_build_plugin(void (*fn)(const char *dir, const char *path,
				    const char *name, void *arg),
			 void *arg);

/** Write @text into @dir/@name with @mode. */
void th_write(const char *dir, const char *name, const char *text,
	      unsigned mode);

/** @dir/@name into @buf. */
const char *th_join(char *buf, size_t len, const char *dir, const char *name);

/**
 * Run @fn(@arg) in a forked child; fail the current cmocka test with the
 * child's message if it fails, crashes, or runs longer than @timeout_ms.
 */
void th_child(void (*fn)(void *), void *arg, int timeout_ms);

/** Result of th_spawn(). */
struct th_proc {
	int status;      /**< exit code, or 128 + signal */
	char *out;       /**< stdout, NUL-terminated (free()) */
	char *err;       /**< stderr, NUL-terminated (free()) */
	double wall_ms;  /**< elapsed wall time */
};

/**
 * Run @argv with the given environment changes ("NAME=value" sets,
 * "NAME" unsets; NULL-terminated), capturing output. Fails the test if it
 * cannot start or outlives @timeout_ms (then it is killed).
 */
void th_spawn(const char *const *argv, const char *const *env,
	      int timeout_ms, struct th_proc *p);
void th_proc_free(struct th_proc *p);

/** Read a whole file; NULL if it cannot be read. free() the result. */
char *th_slurp(const char *path);

/** Count the lines of @text that contain @needle. */
int th_count_lines(const char *text, const char *needle);

/* ---- child side -------------------------------------------------------- */

/** Report a failure from the child and _exit(1). */
_Noreturn void th_fail(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
	__attribute__((format(printf, 3, 4)))
#endif
	;

#define TH_CHECK(cond)                                                       \
	do {                                                                 \
		if (!(cond))                                                 \
			th_fail(__FILE__, __LINE__, "check failed: %s",      \
				#cond);                                      \
	} while (0)

#define TH_CHECK_MSG(cond, ...)                                              \
	do {                                                                 \
		if (!(cond))                                                 \
			th_fail(__FILE__, __LINE__, __VA_ARGS__);            \
	} while (0)

#define TH_CHECK_INT(a, b)                                                   \
	do {                                                                 \
		long long th_a_ = (long long)(a), th_b_ = (long long)(b);     \
		if (th_a_ != th_b_)                                          \
			th_fail(__FILE__, __LINE__, "%s == %lld, expected %s " \
				"== %lld", #a, th_a_, #b, th_b_);            \
	} while (0)

#define TH_CHECK_STR(a, b)                                                   \
	do {                                                                 \
		const char *th_a_ = (a), *th_b_ = (b);                       \
		if (!th_a_ || strcmp(th_a_, th_b_) != 0)                     \
			th_fail(__FILE__, __LINE__, "%s is \"%s\", expected " \
				"\"%s\"", #a, th_a_ ? th_a_ : "(null)", th_b_); \
	} while (0)

#define TH_CHECK_HAS(hay, needle)                                            \
	do {                                                                 \
		const char *th_h_ = (hay), *th_n_ = (needle);                \
		if (!th_h_ || !strstr(th_h_, th_n_))                         \
			th_fail(__FILE__, __LINE__, "%s is \"%s\", expected " \
				"it to contain \"%s\"", #hay,                \
				th_h_ ? th_h_ : "(null)", th_n_);            \
	} while (0)

/** setenv() in the child, checked. value NULL unsets. */
void th_setenv(const char *name, const char *value);

/**
 * Capture libzap's log lines: through zap_set_log_handler() (@handler
 * true) or by redirecting fd 2 to a file, so that the default stderr
 * handler's exact output is checked. Either way th_logs() returns every
 * captured line as "LEVEL domain: msg\n" (handler) or the raw stderr text.
 */
void th_capture_logs(bool handler);
const char *th_logs(void);

/** Lines logged through the handler at @level whose text contains @needle. */
int th_log_count(enum zap_log_level level, const char *domain,
		 const char *needle);

/**
 * Find the report row for transport @name (NULL: any) whose path contains @path_part
 * (NULL: any). Returns the index or -1; fills @e when found.
 */
int th_row(const char *name, const char *path_part,
	   struct zap_report_entry *e);

/** Fail unless row @name (NULL: any name; at @path_part) has @state and its reason
 *  contains @reason_part. Fills @e when not NULL. */
#define TH_CHECK_ROW(name, path_part, state, reason_part, e)                 \
	th_check_row(__FILE__, __LINE__, name, path_part, state, reason_part, e)
void th_check_row(const char *file, int line, const char *name,
		  const char *path_part, enum zap_plugin_state state,
		  const char *reason_part, struct zap_report_entry *e);

/** The whole report as text, for failure messages. */
const char *th_report_text(void);

/** Open a transport by @pref and check its name, then close it. */
#define TH_CHECK_PICK(pref, flags, expect)                                   \
	th_check_pick(__FILE__, __LINE__, pref, flags, expect)
void th_check_pick(const char *file, int line, const char *pref,
		   unsigned flags, const char *expect);

/** Send "ping" through @t and receive it back (loopback fixtures). */
void th_loopback(struct zap_transport *t);

/** Lines of the fixture probe log (ZAP_FIXTURE_PROBE_LOG) naming @name. */
int th_probe_count(const char *log_path, const char *name);

#endif /* ZAP_TESTS_HARNESS_H */
