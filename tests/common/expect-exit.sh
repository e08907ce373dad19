#!/bin/sh
# expect-exit.sh [--plugin-as NAME FILE | --no-plugin] STATUS TEXT PROGRAM [ARGS...]
#
# Runs PROGRAM and passes (exit 0) only when it exits with exactly STATUS
# and its output (stdout and stderr) contains TEXT. For tests of a test:
# that a hardware test fails (1), rather than skips (77), when its plugin
# is broken. Its own status is never 77, so Meson cannot read it as a skip.
#
# --plugin-as NAME FILE: ZAP_PLUGIN_PATH is a fresh directory holding only
#     a copy of FILE named libzap-NAME.so (a fixture posing as a plugin);
# --no-plugin: ZAP_PLUGIN_PATH is a fresh empty directory.
# Either way the probe helper (ZAP_PROBE_HELPER) runs from a copy there.
set -u
dir=
case ${1-} in
--plugin-as | --no-plugin)
	dir=$(mktemp -d "${TMPDIR:-/tmp}/zap-expect-XXXXXX") || exit 1
	trap 'rm -rf "$dir"' EXIT
	if [ "$1" = --plugin-as ]; then
		cp "$3" "$dir/libzap-$2.so" && chmod 0755 "$dir/libzap-$2.so" || exit 1
		shift 2
	fi
	shift
	# The probe helper too, as private-plugins.sh does: libzap checks
	# its directory as a plugin's.
	if [ -n "${ZAP_PROBE_HELPER:-}" ] && [ -f "$ZAP_PROBE_HELPER" ]; then
		cp "$ZAP_PROBE_HELPER" "$dir/zap-probe" && chmod 0755 "$dir/zap-probe" || exit 1
		ZAP_PROBE_HELPER=$dir/zap-probe
		export ZAP_PROBE_HELPER
	fi
	ZAP_PLUGIN_PATH=$dir
	export ZAP_PLUGIN_PATH
	;;
esac
want=$1 text=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$want" ]; then
	echo "expect-exit: $1 exited $rc, expected $want" >&2
	exit 1
fi
case $out in
*"$text"*) ;;
*)
	echo "expect-exit: output of $1 lacks \"$text\"" >&2
	exit 1
	;;
esac
echo "expect-exit: $1 exited $rc with \"$text\", as expected"
