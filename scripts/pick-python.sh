#!/bin/sh
# Print the interpreter to build .venv on. Run as root, the worker starts environment processes
# as unprivileged users, who must be able to execute the virtual environment's interpreter: one
# that lives under a directory they cannot enter (pyenv's under a 0700 /root) would make every
# step fail with "could not be started: Permission denied". So, as root, prefer the first
# Python 3.11+ with venv whose every directory others may traverse; otherwise `python3`.
set -eu
[ "$(id -u)" -eq 0 ] || { echo python3; exit 0; }
reachable() {
    path=$(readlink -f "$1") || return 1
    [ -x "$path" ] || return 1
    [ "$(stat -c %a "$path" | cut -c3)" -ge 5 ] 2>/dev/null || return 1
    dir=$(dirname "$path")
    while [ "$dir" != "/" ]; do
        mode=$(stat -c %a "$dir")
        case "$mode" in *[1357]) ;; *) return 1 ;; esac
        dir=$(dirname "$dir")
    done
}
for candidate in python3 python3.11 /usr/bin/python3 /usr/bin/python3.11; do
    full=$(command -v "$candidate" 2>/dev/null) || continue
    reachable "$full" || continue
    "$full" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || continue
    echo "$full"
    exit 0
done
echo python3
