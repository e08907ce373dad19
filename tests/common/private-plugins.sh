#!/bin/sh
# private-plugins.sh PLUGIN... -- PROGRAM [ARGS...]
#
# Runs PROGRAM with ZAP_PLUGIN_PATH set to a fresh private directory
# (mkdtemp under $TMPDIR or /tmp: mode 0700, owned by us) that holds a
# copy (mode 0755) of every PLUGIN: a libzap-<name>.so file, or a
# directory whose libzap-*.so files are all copied. ZAP_PLUGIN_DIR is set
# empty, so the built-in plugin directory is not scanned either. The
# directory is removed afterwards; the exit status is PROGRAM's (77, a
# skip, included).
#
# Why: the loader refuses a plugin directory with a parent that group or
# others may write, and a build tree may sit under one (`git archive |
# tar -x` as root makes directories 0775). The loader is right; the tests
# must not depend on the modes above the build tree.
set -u
dir=$(mktemp -d "${TMPDIR:-/tmp}/zap-plugins-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	if [ -d "$1" ]; then
		for f in "$1"/libzap-*.so; do
			[ -e "$f" ] || continue
			cp "$f" "$dir/" || exit 1
		done
	else
		cp "$1" "$dir/" || exit 1
	fi
	shift
done
[ $# -ge 2 ] || {
	echo "usage: private-plugins.sh PLUGIN... -- PROGRAM [ARGS...]" >&2
	exit 2
}
shift
if [ -n "${ZAP_PROBE_HELPER:-}" ] && [ -f "$ZAP_PROBE_HELPER" ]; then
	cp "$ZAP_PROBE_HELPER" "$dir/zap-probe" || exit 1
	ZAP_PROBE_HELPER=$dir/zap-probe
	export ZAP_PROBE_HELPER
fi
chmod 0755 "$dir"/* 2>/dev/null
ZAP_PLUGIN_PATH=$dir ZAP_PLUGIN_DIR=
export ZAP_PLUGIN_PATH ZAP_PLUGIN_DIR
"$@"
