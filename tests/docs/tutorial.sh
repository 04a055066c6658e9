#!/bin/sh
# docs/tutorial.md's code blocks, run in an empty folder (CTest docs.tutorial):
#   ```hodu          a program of its own, checked by golden_runner
#   ```hodu file=F   appended to F; F is checked by golden_runner once whole
#   ```c file=F      appended to F
#   ```sh            run in order after the programs, with the build's hodu
#                    on the PATH and a pkg-config that points at the build;
#                    it must succeed
#   any other block  not run (shown output, text)
#
#   tutorial.sh DOC HODU GOLDEN_RUNNER INCLUDE_DIR LIB_DIR EXAMPLES_DIR
# HODU_HOST_FLAGS: extra flags for the C host (a sanitized build's).
set -eu
abs() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
doc=$(abs "$1") hodu=$(abs "$2") runner=$(abs "$3") inc=$(abs "$4") lib=$(abs "$5")
examples=$(abs "$6")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hodu-tutorial.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
mkdir blocks bin
ln -s "$examples" examples

# blocks/NNN.KIND (KIND hodu, sh) or the named file; blocks/list in order
awk -v dir=blocks '
    /^```/ && !inb {
        inb = 1; n++; info = substr($0, 4); kind = info; sub(/ .*/, "", kind)
        file = ""
        if (match(info, /file=[^ ]+/)) file = substr(info, RSTART + 5, RLENGTH - 5)
        if (file != "") out = file
        else out = sprintf("%s/%03d.%s", dir, n, kind)
        print kind, out, (file != "") >> (dir "/list")
        next
    }
    /^```/ && inb { inb = 0; next }
    inb { print >> out }
' "$doc"

hodu_dir=$(cd "$(dirname "$hodu")" && pwd)
# HODU_HOST_FLAGS: the sanitizer flags of a sanitized build's library
cat >bin/pkg-config <<PC
#!/bin/sh
echo "-I$inc -L$lib -lhodu -Wl,-rpath,$lib ${HODU_HOST_FLAGS:-}"
PC
chmod +x bin/pkg-config
PATH=$tmp/bin:$hodu_dir:$PATH
export PATH

fail=0
programs=0
checked=" "
while read -r kind out named; do
    [ "$kind" = hodu ] || continue
    case "$checked" in *" $out "*) continue ;; esac
    checked="$checked$out "
    programs=$((programs + 1))
    "$runner" "$hodu" "$out" || { echo "tutorial: $out (a hodu block) failed" >&2; fail=1; }
done <blocks/list
shells=0
while read -r kind out named; do
    [ "$kind" = sh ] || continue
    shells=$((shells + 1))
    echo "== $out" && cat "$out"
    sh -e "$out" || { echo "tutorial: the sh block $out failed" >&2; fail=1; }
done <blocks/list
echo "tutorial: $programs programs, $shells shell blocks"
[ "$programs" -ge 4 ] && [ "$shells" -ge 3 ] || { echo "tutorial: blocks missing" >&2; exit 1; }
exit $fail
