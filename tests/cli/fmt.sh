#!/bin/sh
# hodu fmt through the command line: files rewritten in place (mode kept),
# --check naming the files that would change, standard input to standard
# output, and every error with its exit status: 1 for a file that does not
# parse (left as it was, the error at file:line:col), 2 for usage errors and
# files that cannot be read.
# usage: fmt.sh HODU
HODU=$1
DIR=$(mktemp -d /tmp/hodu_fmt_XXXXXX) || exit 2
trap 'rm -rf "$DIR"' EXIT
. "$(dirname "$0")/checks.sh"

printf 'let x=1\nif x>0 {\nprint( x )\n}\n' > "$DIR/a.hodu"
printf 'let x = 1\nif x > 0 {\n    print(x)\n}\n' > "$DIR/want.hodu"
cp "$DIR/want.hodu" "$DIR/good.hodu"
cp "$DIR/a.hodu" "$DIR/a_orig.hodu"
chmod 750 "$DIR/a.hodu"

# --check: names the file that would change, changes nothing
"$HODU" fmt --check "$DIR/a.hodu" "$DIR/good.hodu" > "$DIR/out" 2> "$DIR/err"
check "check unformatted" 1 $?
contains "check names the file" "$DIR/out" "$DIR/a.hodu"
if grep -qF good.hodu "$DIR/out"; then
    echo "FAIL check names a formatted file"
    fails=$((fails + 1))
fi
same "check leaves the file" "$DIR/a.hodu" "$DIR/a_orig.hodu"
"$HODU" fmt --check "$DIR/good.hodu" > "$DIR/out" 2>&1
check "check formatted" 0 $?

# in place: the layout, the mode kept, the same output when run
"$HODU" fmt "$DIR/a.hodu"
check "rewrite" 0 $?
same "rewritten" "$DIR/want.hodu" "$DIR/a.hodu"
mode=$(stat -c %a "$DIR/a.hodu")
[ "$mode" = 750 ] || { echo "FAIL mode $mode after rewrite, expected 750"; fails=$((fails + 1)); }
"$HODU" "$DIR/a.hodu" > "$DIR/out1"
"$HODU" "$DIR/a_orig.hodu" > "$DIR/out2"
same "same output" "$DIR/out1" "$DIR/out2"
"$HODU" fmt --check "$DIR/a.hodu"
check "idempotent" 0 $?

# through a symbolic link: the file it names is rewritten, the link stays
cp "$DIR/a_orig.hodu" "$DIR/target.hodu"
ln -s target.hodu "$DIR/link.hodu"
"$HODU" fmt "$DIR/link.hodu"
check "through a link" 0 $?
same "link target formatted" "$DIR/want.hodu" "$DIR/target.hodu"
[ -L "$DIR/link.hodu" ] || { echo "FAIL the link was replaced"; fails=$((fails + 1)); }

# standard input to standard output
"$HODU" fmt - < "$DIR/a_orig.hodu" > "$DIR/out"
check "stdin" 0 $?
same "stdin output" "$DIR/want.hodu" "$DIR/out"

# a syntax error: reported with its place, the file untouched
printf 'let x = (1 +\nprint(x)\n' > "$DIR/bad.hodu"
cp "$DIR/bad.hodu" "$DIR/bad_orig.hodu"
"$HODU" fmt "$DIR/bad.hodu" 2> "$DIR/err"
check "syntax error" 1 $?
contains "syntax error place" "$DIR/err" "bad.hodu:2:9: error: unexpected end of input"
same "bad file untouched" "$DIR/bad.hodu" "$DIR/bad_orig.hodu"
printf 'let = 1\n' | "$HODU" fmt - > "$DIR/out" 2> "$DIR/err"
check "syntax error on stdin" 1 $?
contains "stdin name" "$DIR/err" "<stdin>:1:5: error:"

# a later file is still formatted after an earlier one fails
cp "$DIR/a_orig.hodu" "$DIR/c.hodu"
"$HODU" fmt "$DIR/bad.hodu" "$DIR/c.hodu" 2> /dev/null
check "error then a file" 1 $?
same "second file formatted" "$DIR/want.hodu" "$DIR/c.hodu"

# usage errors and unreadable files
"$HODU" fmt 2> "$DIR/err"
check "no file" 2 $?
contains "usage" "$DIR/err" "usage: hodu fmt"
"$HODU" fmt --check 2> /dev/null
check "check without a file" 2 $?
"$HODU" fmt --bogus "$DIR/good.hodu" 2> "$DIR/err"
check "unknown option" 2 $?
contains "unknown option" "$DIR/err" "unknown option --bogus"
"$HODU" fmt "$DIR/missing.hodu" 2> "$DIR/err"
check "missing file" 2 $?
contains "missing file" "$DIR/err" "cannot read $DIR/missing.hodu"
"$HODU" fmt "$DIR" 2> "$DIR/err"
check "a folder" 2 $?
"$HODU" fmt --help > "$DIR/out"
check "help" 0 $?
contains "help text" "$DIR/out" "usage: hodu fmt"
if ls "$DIR" | grep -q fmt-tmp; then
    echo "FAIL a temporary file was left behind"
    fails=$((fails + 1))
fi

[ $fails -eq 0 ] && echo "all fmt CLI checks passed"
[ $fails -eq 0 ]
