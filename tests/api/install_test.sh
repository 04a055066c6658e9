#!/bin/sh
# The installed package (CTest: install.package). Installs the build into a
# temporary prefix, checks the files, the SONAME and the exported symbols,
# builds examples/embed against the prefix with pkg-config (plain cc) and
# with find_package (shared and static), runs each, and checks that the
# installed program and library find the installed standard modules.
#
#   install_test.sh CMAKE BUILD_DIR EXAMPLE_DIR [SCRIPT.hoduscript]
# With a script, each build of the example also runs it.
# HODU_HOST_FLAGS: extra compile and link flags for the hosts (sanitizers).
set -eu

cmake=$1
build=$2
example=$3
script=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
flags=${HODU_HOST_FLAGS:-}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hodu-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

fail() {
    echo "install test: $*" >&2
    exit 1
}

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "cmake --install failed"; }

# ---- the files ----
pc=$(find "$prefix" -name hodu.pc | head -n 1)
[ -n "$pc" ] || fail "no hodu.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in include/hodu.h bin/hodu share/hodu/stdlib; do
    [ -e "$prefix/$f" ] || fail "missing $f"
done
for f in libhodu.so libhodu.so.0 libhodu.so.0.1.0 libhodu.a cmake/hodu/hoduConfig.cmake \
    cmake/hodu/hoduConfigVersion.cmake cmake/hodu/hoduTargets.cmake; do
    [ -e "$libdir/$f" ] || fail "missing $libdir/$f"
done
[ -L "$libdir/libhodu.so.0" ] || fail "libhodu.so.0 is not a link"

soname=$(objdump -p "$libdir/libhodu.so.0.1.0" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = "libhodu.so.0" ] || fail "SONAME is '$soname', expected libhodu.so.0"

nm -D --defined-only "$libdir/libhodu.so.0.1.0" | awk '{ print $NF }' >"$tmp/exports"
others=$(grep -v '^hodu_' "$tmp/exports" || true)
[ -z "$others" ] || fail "exported symbols outside hodu_: $others"
grep -q '^hodu_vm_new$' "$tmp/exports" || fail "hodu_vm_new is not exported"
echo "exports: $(wc -l <"$tmp/exports") symbols, all hodu_"

# ---- the example, three ways ----
cat >"$tmp/expected" <<'EOF'
hodu 0.1.0
predict(x) [4, 2]:
    1.9000   0.2000
    3.7000   1.1000
    0.7000   0.0000
    0.6000   0.0000
EOF

sed 's/^predict(x)/script output y/' "$tmp/expected" >"$tmp/expected-script"

run_compare() { # expected, name, command...
    want=$1
    name=$2
    shift 2
    "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
        { cat "$tmp/$name.err" >&2; fail "$name: the example failed"; }
    cmp -s "$want" "$tmp/$name.out" ||
        { diff "$want" "$tmp/$name.out" >&2 || true; fail "$name: unexpected output"; }
    echo "$name: ok"
}

check_run() { # name, command... (from source, then the script if given)
    name=$1
    shift
    run_compare "$tmp/expected" "$name" "$@"
    if [ -n "$script" ]; then
        run_compare "$tmp/expected-script" "$name-script" "$@" "$script"
    fi
}

export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --modversion hodu)" = "0.1.0" ] || fail "pkg-config --modversion hodu"
# shellcheck disable=SC2046,SC2086
$cc -std=c11 -Wall -Wextra -Werror $flags -o "$tmp/embed-pc" "$example/embed.c" \
    $(pkg-config --cflags --libs hodu) || fail "building with pkg-config"
check_run pkg-config env LD_LIBRARY_PATH="$libdir" "$tmp/embed-pc"

cmake_example() { # name, extra cmake arguments...
    name=$1
    shift
    "$cmake" -S "$example" -B "$tmp/$name" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" "$@" \
        >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name: configure failed"; }
    "$cmake" --build "$tmp/$name" >>"$tmp/$name.log" 2>&1 ||
        { cat "$tmp/$name.log"; fail "$name: build failed"; }
}
cmake_example find_package
check_run find_package "$tmp/find_package/embed" # RPATH: no library path needed
cmake_example find_package_static -DHODU_EMBED_STATIC=ON
check_run find_package_static "$tmp/find_package_static/embed"
cmake_example cmake_pkg_config -DHODU_EMBED_PKGCONFIG=ON
check_run cmake_pkg_config env LD_LIBRARY_PATH="$libdir" "$tmp/cmake_pkg_config/embed"

# ---- the installed standard library folder ----
# A module that exists only in the prefix: found by the installed program
# (libhodu.a inside) and by a host linking the installed libhodu.so.
printf 'let answer = 42\n' >"$prefix/share/hodu/stdlib/install_probe.hodu"
out=$("$prefix/bin/hodu" -e 'import install_probe
print(install_probe.answer)') || fail "installed hodu: import install_probe failed"
[ "$out" = "42" ] || fail "installed hodu printed '$out'"
# shellcheck disable=SC2046,SC2086
$cc -std=c11 $flags -o "$tmp/probe" "$here/install_probe.c" $(pkg-config --cflags --libs hodu) ||
    fail "building the probe"
env LD_LIBRARY_PATH="$libdir" "$tmp/probe" || fail "libhodu.so: import install_probe failed"
echo "stdlib: found in the prefix by the program and the library"
echo "install test passed"
