#!/usr/bin/env bash
# Build the Debian packages from a copy of this tree and check, as root on a
# Debian 12 machine, that they do what packaging/README.md promises:
#
#  - libzap0 + zap-tools alone: zap-info lists `default` and no plugin;
#  - each plugin package built: installing it makes zap-info list it (not
#    present on a host without its hardware, loaded on one with it);
#    removing it makes it disappear;
#  - libzap-dev ships the documentation (docs/, the default wire's WIRE.md)
#    under /usr/share/doc/libzap, and each plugin package its README there;
#  - libzap-dev ships libzap(7) and a section 3 page for every function
#    libzap.so.0 exports, each formatting without a warning;
#  - the example plugin (examples/plugin, as shipped in libzap-dev) builds
#    against the installed libzap-dev alone, installs into pkg-config's
#    plugindir, exports only its descriptor, shows up in zap-info, and
#    ZAP_TRANSPORT=inproc picks it;
#  - the Go package (golang-github-libzap-libzap-dev) ships the binding's
#    source under /usr/share/gocode/src, and a Go program that imports it
#    (packaging/go-hello) builds and runs against the installed packages
#    alone: in GOPATH mode (GO111MODULE=off GOPATH=/usr/share/gocode), and
#    as a module vendoring the installed source (-mod=vendor), with no
#    source checkout, no replace directive and no network;
#  - lintian finds no error;
#  - with every package installed, the tree's own test suite (a fresh
#    build of the copy) still passes: it must never see the installed
#    plugins, probe helper or library (tests/README.md);
#  - purging everything leaves no file behind under /usr, /etc and /opt.
#
# Usage: packaging/test-packages.sh [--keep]   (--keep: leave the work dir)
# Environment: ZAP_PKG_CHECK=1 also runs the test suite inside the package
# build (dh_auto_test); by default the build sets DEB_BUILD_OPTIONS=nocheck
# because scripts/test runs that suite already. ZAP_PKG_SUITE=0 leaves out
# the suite run with the packages installed.
#
# It installs what it needs (debhelper, lintian, the Build-Depends) and
# leaves the machine as it found it apart from those. Last line:
# "packaging: N passed, M failed"; exit status 0 only when M is 0.
set -euo pipefail

keep=false
[ "${1:-}" = --keep ] && keep=true
if [ "$(id -u)" != 0 ]; then
	echo "packaging/test-packages.sh: run as root (it installs packages)" >&2
	exit 2
fi
src_root=$(cd "$(dirname "$0")/.." && pwd)
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8
pkg_check=${ZAP_PKG_CHECK:-0}
pkg_suite=${ZAP_PKG_SUITE:-1}
# The checks are about the installed system: no ZAP_* from the caller.
for v in $(compgen -e | grep '^ZAP_' || true); do unset "$v"; done
start=$(date +%s)
work=$(mktemp -d /tmp/zap-pkgtest.XXXXXX)
ours=(libzap0 libzap-dev zap-tools golang-github-libzap-libzap-dev
      libzap-plugin-uma libzap-plugin-gpudirect libzap-plugin-dpdk)
hw_plugins=(uma gpudirect dpdk)
passed=0 failed=0
example_files=()

ok() { passed=$((passed + 1)); echo "ok   - $*"; }
bad() { failed=$((failed + 1)); echo "FAIL - $*"; }
# check DESCRIPTION COMMAND...: one test, passing when COMMAND succeeds.
check() {
	local what=$1
	shift
	if "$@"; then ok "$what"; else bad "$what"; fi
}
step() { echo "# $*"; }
# run LOG COMMAND...: run quietly; on failure show the log's tail.
run() {
	local log=$work/$1
	shift
	if "$@" >"$log" 2>&1; then return 0; fi
	echo "  command failed: $*" >&2
	tail -n 40 "$log" | sed 's/^/  | /' >&2
	return 1
}
installed_ours() {
	local p s
	for p in "${ours[@]}"; do
		s=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
		[ -z "$s" ] || [ "$s" = not-installed ] || echo "$p"
	done
}
purge_ours() {
	local pkgs
	pkgs=$(installed_ours)
	[ -z "$pkgs" ] || run purge.log apt-get purge -y $pkgs
}
cleanup() {
	local f
	for f in "${example_files[@]}"; do rm -f "$f"; done
	[ -z "${plugindir:-}" ] || rmdir --ignore-fail-on-non-empty "$plugindir" 2>/dev/null || true
	purge_ours || true
	if $keep; then echo "# work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# zap_info NAME [ENV...]: run /usr/bin/zap-info --json (with ENV) into
# $work/NAME.json, its exit status into $work/NAME.rc.
zap_info() {
	local name=$1
	shift
	set +e
	env "$@" /usr/bin/zap-info --json >"$work/$name.json" 2>"$work/$name.err"
	echo $? >"$work/$name.rc"
	set -e
}
# jq_py NAME EXPR: evaluate a Python expression over the JSON (as d) and the
# exit status (as rc) of zap_info NAME; succeed when it is true.
jq_py() {
	python3 - "$work/$1.json" "$(cat "$work/$1.rc")" "$2" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError as e:
    sys.exit("  zap-info --json is not JSON: %s" % e)
rc = int(sys.argv[2])
names = [p["name"] for p in d["plugins"]]
plugin = {p["name"]: p for p in d["plugins"]}
if not eval("(" + sys.argv[3] + "\n)"):
    sys.exit("  not true: %s\n  exit %d, plugins %s, pick %s" % (
        sys.argv[3], rc, [(p["name"], p["state"]) for p in d["plugins"]],
        d["pick"]))
EOF
}

step "dependencies"
need=(build-essential dpkg-dev debhelper lintian python3 meson ninja-build pkg-config
      golang-go)
missing=()
for p in "${need[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
updated=false
if [ ${#missing[@]} -gt 0 ]; then
	run apt-update.log apt-get update -qq
	updated=true
	run apt-deps.log apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

step "copy of the tree in $work/src"
mkdir "$work/src"
if git -C "$src_root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# Tracked and untracked-but-not-ignored files: the tree as it is,
	# without build directories.
	git -C "$src_root" ls-files -z --cached --others --exclude-standard |
		(cd "$src_root" && tar --null -T - -cf -) | tar -C "$work/src" -xf -
else
	tar -C "$src_root" --exclude='./build*' --exclude=./.git -cf - . |
		tar -C "$work/src" -xf -
fi
if ! (cd "$work/src" && dpkg-checkbuilddeps >/dev/null 2>&1); then
	$updated || run apt-update.log apt-get update -qq
	run build-dep.log apt-get build-dep -y -qq "$work/src"
fi
# Plugins this tree has (the same test as debian/rules).
expected=()
for p in "${hw_plugins[@]}"; do
	grep -qs "'plugin-$p'" "$work/src/plugins/$p/meson.build" && expected+=("$p")
done
echo "# hardware plugins in this tree: ${expected[*]:-none}"

# Left over from an interrupted run? Start from nothing of ours.
leftover=$(installed_ours)
if [ -n "$leftover" ]; then
	echo "# purging packages left installed: $leftover"
	purge_ours
fi

step "build: dpkg-buildpackage -us -uc -b"
opts=nocheck
[ "$pkg_check" = 1 ] && opts=
t0=$(date +%s)
if (cd "$work/src" && run build.log env DEB_BUILD_OPTIONS="$opts" \
	dpkg-buildpackage -us -uc -b -J"$(nproc)"); then
	ok "packages build ($(($(date +%s) - t0)) s${opts:+, $opts})"
else
	bad "packages build"
	echo "packaging: $passed passed, $failed failed"
	exit 1
fi
deb() { ls "$work"/"$1"_*.deb 2>/dev/null | head -n 1; }
for p in libzap0 libzap-dev zap-tools golang-github-libzap-libzap-dev; do
	check "$p built" test -n "$(deb "$p")"
done
for p in "${expected[@]}"; do
	check "libzap-plugin-$p built" test -n "$(deb "libzap-plugin-$p")"
done
for p in "${hw_plugins[@]}"; do
	case " ${expected[*]} " in *" $p "*) ;; *)
		check "libzap-plugin-$p not built (not in this tree)" \
			test -z "$(deb "libzap-plugin-$p")" ;;
	esac
done
echo "# packages:"
for f in "$work"/*.deb; do
	printf '#   %-40s %7s bytes\n' "$(basename "$f")" "$(stat -c %s "$f")"
done

step "lintian"
if lintian --fail-on error --display-info "$work"/libzap_*.changes \
	>"$work/lintian.log" 2>&1; then
	ok "lintian: no errors ($(grep -c '^W:' "$work/lintian.log" || true) warnings)"
else
	bad "lintian reports errors"
fi
grep -E '^[EWI]:' "$work/lintian.log" | sed 's/^/  /' || true

multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
plugindir=/usr/lib/$multiarch/zap-1
# What is on the system before any package of ours: compared after the purge.
snapshot() {
	find /usr /etc /opt -xdev -name __pycache__ -prune \
		-o -print 2>/dev/null | LC_ALL=C sort
}
snapshot >"$work/before.files"

step "libzap0 + zap-tools"
check "install libzap0 + zap-tools" run install-core.log \
	apt-get install -y --no-install-recommends "$(deb libzap0)" "$(deb zap-tools)"
zap_info core
check "zap-info --json lists default and no plugin" jq_py core \
	'names == ["default"] and plugin["default"]["state"] == "loaded"'
check "auto pick is default, exit status 0" jq_py core \
	'rc == 0 and d["pick"]["name"] == "default" and d["pick"]["status"] == "ok"'
check "built-in directory is $plugindir" jq_py core \
	"[x['path'] for x in d['directories'] if x['source'] == 'built-in'] == ['$plugindir']"
check "zap-info --version runs" run version.log /usr/bin/zap-info --version
check "zap-perf --help runs" run perf-help.log /usr/bin/zap-perf --help
for page in man1/zap-info.1 man1/zap-perf.1; do
	check "man page $page installed (zap-tools)" test -f "/usr/share/man/$page.gz"
done
check "no library page before libzap-dev (libzap(7), section 3 are its own)" \
	sh -c '! ls /usr/share/man/man7/libzap.7.gz /usr/share/man/man3/zap_*.3.gz 2>/dev/null | grep -q .' 
check "libzap0 ships no libzap.so link (libzap-dev does)" \
	test ! -e "/usr/lib/$multiarch/libzap.so"
check "libzap0 ships the probe helper /usr/lib/$multiarch/zap/zap-probe" \
	sh -c "dpkg -L libzap0 | grep -qx /usr/lib/$multiarch/zap/zap-probe"

for p in "${expected[@]}"; do
	step "libzap-plugin-$p"
	check "install libzap-plugin-$p" run "install-$p.log" \
		apt-get install -y --no-install-recommends "$(deb "libzap-plugin-$p")"
	check "libzap-plugin-$p ships only $plugindir/libzap-$p.so (+ docs)" \
		test "$(dpkg -L "libzap-plugin-$p" | while read -r f; do
			[ -d "$f" ] || echo "$f"; done | grep -v '^/usr/share/doc/')" = \
		"$plugindir/libzap-$p.so"
	check "libzap-plugin-$p ships its README in /usr/share/doc/libzap/plugins/$p" \
		test -f "/usr/share/doc/libzap/plugins/$p/README.md"
	zap_info "with-$p"
	check "zap-info lists $p (not present, or loaded where the hardware is)" \
		jq_py "with-$p" "names == ['default', '$p'] and
			plugin['$p']['state'] in ('not present', 'loaded') and
			plugin['$p']['path'] == '$plugindir/libzap-$p.so'"
	jq_py "with-$p" "print('  $p: %s: %s' % (plugin['$p']['state'],
		plugin['$p']['reason'])) or True" || true
	check "remove libzap-plugin-$p" run "remove-$p.log" \
		apt-get remove -y "libzap-plugin-$p"
	zap_info "without-$p"
	check "$p gone once libzap-plugin-$p is removed" jq_py "without-$p" \
		'names == ["default"]'
done

step "example plugin against the installed libzap-dev"
check "install libzap-dev" run install-dev.log \
	apt-get install -y --no-install-recommends "$(deb libzap-dev)"
docs=/usr/share/doc/libzap
for f in docs/README.md docs/architecture.md docs/plugin-abi.md docs/loader.md \
	docs/wires.md docs/environment.md plugins/default/WIRE.md; do
	check "libzap-dev ships $docs/$f (uncompressed: the pages link to each other)" \
		test -f "$docs/$f"
done
check "no installed document points outside the installed tree (DESIGN.md, ../shared)" \
	sh -c "! grep -rlE 'DESIGN\.md|\.\./shared' $docs"
# The library's manual pages: libzap(7) and one section 3 page for every
# function libzap0 exports (its dynamic symbols, as dpkg-shlibdeps sees
# them), each in libzap-dev and readable by man without a warning.
check "libzap-dev ships libzap(7)" \
	sh -c "dpkg -L libzap-dev | grep -qx /usr/share/man/man7/libzap.7.gz"
missing_pages=$(nm -D --defined-only "/usr/lib/$multiarch/libzap.so.0" | awk '$3 ~ /^zap_/ {
	sub(/@.*/, "", $3); print $3 }' | sort -u | while read -r fn; do
	dpkg -L libzap-dev | grep -qx "/usr/share/man/man3/$fn.3.gz" || echo "$fn"; done)
check "libzap-dev ships a section 3 page for every exported function${missing_pages:+ (missing: $(echo $missing_pages))}" \
	test -z "$missing_pages"
if command -v man >/dev/null; then
	man_warn=$(for p in /usr/share/man/man7/libzap.7.gz /usr/share/man/man3/zap_*.3.gz; do
		LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$p" 2>&1 >/dev/null |
			sed "s|^|$p: |"; done)
	check "the library's pages format without warnings${man_warn:+: $man_warn}" \
		test -z "$man_warn"
	check "man 3 zap_pick finds the installed page" \
		sh -c "man -w 3 zap_pick | grep -qx /usr/share/man/man3/zap_pick.3.gz"
fi
check "pkg-config plugindir is $plugindir" \
	test "$(pkg-config --variable=plugindir zap-plugin)" = "$plugindir"
ex_src=/usr/share/doc/libzap-dev/examples/plugin
check "libzap-dev ships the example in $ex_src" test -f "$ex_src/meson.build"
# Build what the package shipped (or the tree's copy if it did not), with no
# access to the source tree: headers and pkg-config files from /usr only.
[ -f "$ex_src/meson.build" ] || ex_src=$work/src/examples/plugin
cp -r "$ex_src" "$work/example"
if run ex-setup.log meson setup "$work/example-build" "$work/example" -Dwerror=true &&
	run ex-build.log meson compile -C "$work/example-build"; then
	ok "example plugin builds from the installed headers and pkg-config"
else
	bad "example plugin builds from the installed headers and pkg-config"
fi
check "example's own test (round trip over inproc) passes" \
	run ex-test.log meson test -C "$work/example-build" --print-errorlogs
if run ex-install.log meson install -C "$work/example-build"; then
	example_files=("$plugindir/libzap-inproc.so")
	check "example installed into $plugindir" test -f "$plugindir/libzap-inproc.so"
else
	bad "meson install of the example"
fi
check "example exports only zap_plugin_v1" test \
	"$(nm -D --defined-only "$plugindir/libzap-inproc.so" 2>/dev/null | awk '{print $3}')" \
	= zap_plugin_v1
zap_info example
check "zap-info lists inproc, loaded; auto still picks default" jq_py example \
	'"inproc" in names and plugin["inproc"]["state"] == "loaded" and
	 d["pick"]["name"] == "default"'
zap_info example-picked ZAP_TRANSPORT=inproc
check "ZAP_TRANSPORT=inproc picks it (exit 0, pick.name inproc)" jq_py example-picked \
	'rc == 0 and d["pick"]["name"] == "inproc" and d["pick"]["status"] == "ok"
	 and d["pick"]["source"] == "ZAP_TRANSPORT"'
rm -f "$plugindir/libzap-inproc.so"
rmdir --ignore-fail-on-non-empty "$plugindir" 2>/dev/null || true
example_files=()
zap_info example-removed
check "inproc gone once its file is removed" jq_py example-removed \
	'names == ["default"]'

step "Go package against the installed packages"
go_path=github.com/libzap/libzap/bindings/go
gocode=/usr/share/gocode/src/$go_path
check "install golang-github-libzap-libzap-dev" run install-go.log \
	apt-get install -y --no-install-recommends "$(deb golang-github-libzap-libzap-dev)"
# What bindings/go/meson.build installs must be the whole package: every
# .go file of the tree's package and command but their tests.
go_missing=$(cd "$work/src/bindings/go" && for f in go.mod transport/*.go cmd/*/*.go; do
	case $f in *_test.go) continue ;; esac
	[ -f "$gocode/$f" ] || echo "$f"
done)
check "it ships the package's source in $gocode${go_missing:+ (missing: $go_missing)}" \
	test -z "$go_missing" -a -f "$gocode/transport/transport.go"
check "it ships no test file" test -z "$(find "$gocode" -name '*_test.go')"
check "it ships its README in /usr/share/doc/golang-github-libzap-libzap-dev" \
	test -f /usr/share/doc/golang-github-libzap-libzap-dev/README.md
# The program, copied out of the tree; built with nothing from the
# caller's environment: a fresh HOME, Go's caches in the work dir, the
# module proxy off, the cgo flags from the installed zap.pc.
go_env=(env -i PATH=/usr/bin:/bin HOME="$work/go-home" GOCACHE="$work/go-cache"
	GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1)
# go_hello NAME DIR ENV...: build DIR with ENV into DIR/hello, run it.
go_hello() {
	local name=$1 dir=$2
	shift 2
	(cd "$dir" && run "$name.log" "${go_env[@]}" "$@" go build -o "$dir/hello" .) &&
		run "$name.out" env ZAP_TRANSPORT_QUIET=1 "$dir/hello" &&
		grep -q '^libzap .*, default: hello$' "$work/$name.out"
}
mkdir "$work/go-gopath"
cp "$work/src/packaging/go-hello/main.go" "$work/go-gopath/"
check "a Go program builds in GOPATH mode (GOPATH=/usr/share/gocode) and runs" \
	go_hello go-gopath "$work/go-gopath" GO111MODULE=off \
		GOPATH=/usr/share/gocode GOFLAGS=-buildvcs=false
sed 's/^/  /' "$work/go-gopath.out" 2>/dev/null || true
# (/lib/<triplet> is /usr/lib/<triplet> on a merged-/usr system.)
check "its libzap is the installed one" \
	sh -c "ldd '$work/go-gopath/hello' | grep -qE 'libzap\.so\.0 => (/usr)?/lib/'"
# A module vendoring the installed source, as bindings/go/README.md tells
# users outside Debian to vendor a copy: no replace directive.
vendor_installed() {
	local v=$work/go-vendor
	[ -d "$gocode/transport" ] || return 1
	mkdir -p "$v/vendor/$go_path" &&
		cp "$work/src/packaging/go-hello/main.go" "$v/" &&
		cp -r "$gocode/transport" "$gocode/go.mod" "$v/vendor/$go_path/" &&
		printf '%s\n' 'module example.com/hello' '' 'go 1.19' '' \
			"require $go_path v0.0.0" >"$v/go.mod" &&
		printf '%s\n' "# $go_path v0.0.0" '## explicit; go 1.19' \
			"$go_path/transport" >"$v/vendor/modules.txt"
}
go_vendored() {
	vendor_installed && go_hello go-vendor "$work/go-vendor" GO111MODULE=on \
		GOPATH="$work/go-home/go" GOFLAGS="-mod=vendor -buildvcs=false"
}
check "a module vendoring the installed source builds (-mod=vendor) and runs" go_vendored

if [ "$pkg_suite" = 1 ]; then
	step "the tree's test suite with every package installed"
	all_debs=()
	for p in libzap0 libzap-dev zap-tools golang-github-libzap-libzap-dev \
		"${expected[@]/#/libzap-plugin-}"; do
		all_debs+=("$(deb "$p")")
	done
	check "install every package" run install-all.log \
		apt-get install -y --no-install-recommends "${all_debs[@]}"
	zap_info all-installed
	jq_py all-installed "print('  installed: %s' % names) or True" || true
	# The copy as the package build saw it, built again with its tests.
	t0=$(date +%s)
	if run suite-setup.log meson setup "$work/suite-build" "$work/src" -Dwerror=true &&
		run suite-build.log meson compile -C "$work/suite-build" &&
		run suite-test.log meson test -C "$work/suite-build" --print-errorlogs \
			--num-processes "$(nproc)"; then
		ok "test suite passes with the packages installed ($(grep -E '^(Ok|Fail|Skipped):' \
			"$work/suite-test.log" | tr -s ' \n' ' ')in $(($(date +%s) - t0)) s)"
	else
		bad "test suite with the packages installed (log: $work/suite-test.log)"
	fi
fi

step "purge"
purge_ours
check "no package of ours left (not even config files)" test -z "$(installed_ours)"
snapshot >"$work/after.files"
if diff "$work/before.files" "$work/after.files" >"$work/leftover.diff"; then
	ok "purge leaves no file behind (/usr, /etc, /opt)"
else
	bad "files differ after the purge:"
	sed 's/^/  /' "$work/leftover.diff" | head -n 40
fi

echo "# took $(($(date +%s) - start)) s"
echo "packaging: $passed passed, $failed failed"
[ "$failed" = 0 ]
