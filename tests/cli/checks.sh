# Checks the command-line tests share (sourced): each failure is printed
# and counted in $fails.
fails=0

check() { # name, expected status, actual status
    if [ "$2" != "$3" ]; then
        echo "FAIL $1: exit status $3, expected $2"
        fails=$((fails + 1))
    fi
}

contains() { # name, file, text
    if ! grep -qF -- "$3" "$2"; then
        echo "FAIL $1: no \"$3\" in:"
        cat "$2"
        fails=$((fails + 1))
    fi
}

same() { # name, file, file
    if ! cmp -s "$2" "$3"; then
        echo "FAIL $1: $2 and $3 differ:"
        diff "$2" "$3"
        fails=$((fails + 1))
    fi
}
