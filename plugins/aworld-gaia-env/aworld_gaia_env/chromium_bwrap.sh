#!/bin/sh
# Started by Playwright in place of Chromium (see browser_launch.py): drops to the browser's uid and
# runs Chromium inside bubblewrap. Playwright's pipes (fds 3 and 4) pass through unchanged.
#   AWORLD_BROWSER_BWRAP_ARGS  a root-only file of NUL-separated bubblewrap arguments, opened here
#                              before the uid changes, as fd 9
#   AWORLD_BROWSER_EXECUTABLE  Chromium's binary
#   AWORLD_BROWSER_UID         the uid to run as (empty: the server is not root, no change)
# Playwright's own profile directory (--user-data-dir, made by its driver) is given to that uid and
# bound at its own path: it is the only host directory made by someone else that Chromium writes.
set -eu
args=${AWORLD_BROWSER_BWRAP_ARGS:?the browser launcher needs AWORLD_BROWSER_BWRAP_ARGS}
exe=${AWORLD_BROWSER_EXECUTABLE:?the browser launcher needs AWORLD_BROWSER_EXECUTABLE}
uid=${AWORLD_BROWSER_UID:-}
unset AWORLD_BROWSER_BWRAP_ARGS AWORLD_BROWSER_EXECUTABLE AWORLD_BROWSER_UID
profile=
for arg do
    case $arg in --user-data-dir=*) profile=${arg#--user-data-dir=} ;; esac
done
if [ -z "$profile" ]; then
    echo "browser launcher: Playwright passed no --user-data-dir" >&2
    exit 125
fi
if [ -n "$uid" ]; then
    chown -R "$uid:$uid" "$profile"
    exec setpriv --reuid="$uid" --regid="$uid" --clear-groups -- \
        bwrap --args 9 --bind "$profile" "$profile" --remount-ro / -- "$exe" "$@" 9<"$args"
fi
exec bwrap --args 9 --bind "$profile" "$profile" --remount-ro / -- "$exe" "$@" 9<"$args"
