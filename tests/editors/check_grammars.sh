#!/bin/sh
# The editor grammars know the whole language (CTest editors.grammars):
# every keyword of the lexer (lang/lexer.re) and every builtin name of the
# VM (builtin_names) appears as a word in the VS Code grammar, the Vim
# syntax and the Emacs mode; the VS Code files are valid JSON.
#
#   check_grammars.sh BUILTIN_NAMES LEXER.re EDITORS_DIR
set -eu
names_bin=$1 lexer=$2 dir=$3
files="$dir/vscode/syntaxes/hodu.tmLanguage.json $dir/vim/syntax/hodu.vim $dir/emacs/hodu-mode.el"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hodu-editors.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

sed -n 's/^ *"\([a-z_]*\)" { return hd_lex_tok.*/\1/p' "$lexer" >"$tmp/keywords"
"$names_bin" >"$tmp/builtins"
nk=$(wc -l <"$tmp/keywords")
nb=$(wc -l <"$tmp/builtins")
[ "$nk" -ge 20 ] && [ "$nb" -ge 100 ] || { echo "editors: only $nk keywords, $nb builtins found" >&2; exit 1; }

# where each grammar lists its words: an alternation of the VS Code
# grammar's patterns, a Vim `syn keyword` line, an Emacs string
listed() { # WORD FILE
    case "$2" in
    *.json) grep -qE -- "[(|]$1[|)]" "$2" ;;
    *.vim) grep '^syn keyword' "$2" | grep -qw -- "$1" ;;
    *.el) grep -qF -- "\"$1\"" "$2" ;;
    esac
}

fail=0
for f in $files; do
    [ -f "$f" ] || { echo "editors: $f is missing" >&2; fail=1; continue; }
    for w in $(cat "$tmp/keywords" "$tmp/builtins"); do
        listed "$w" "$f" || { echo "editors: $(basename "$f") lacks '$w'" >&2; fail=1; }
    done
done

# JSON: CMake's parser (string(JSON)) fails on a damaged file
for j in "$dir/vscode/syntaxes/hodu.tmLanguage.json" "$dir/vscode/language-configuration.json" \
         "$dir/vscode/package.json"; do
    cat >"$tmp/json.cmake" <<CM
file(READ "$j" text)
string(JSON kind TYPE "\${text}")
CM
    cmake -P "$tmp/json.cmake" >/dev/null 2>&1 || { echo "editors: $j is not valid JSON" >&2; fail=1; }
done
echo "editors: $nk keywords and $nb builtins checked in $(echo $files | wc -w) grammars"
exit $fail
