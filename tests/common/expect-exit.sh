#!/bin/sh
# expect-exit.sh STATUS TEXT PROGRAM [ARGS...]
#
# Runs PROGRAM and passes (exit 0) only when it exits with exactly STATUS
# and its output (stdout and stderr) contains TEXT. For tests of a test:
# that a hardware test fails (1), rather than skips (77), when its plugin
# is broken. Its own status is never 77, so Meson cannot read it as a skip.
set -u
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
