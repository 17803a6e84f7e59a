#!/bin/sh
# Started by Playwright in place of Chromium (see browser_launch.py): merges Chromium's feature
# switches, turns network prediction off in the profile, drops to the browser's uid and runs
# Chromium inside bubblewrap. Playwright's pipes (fds 3 and 4) pass through unchanged.
#   AWORLD_BROWSER_BWRAP_ARGS  a root-only file of NUL-separated bubblewrap arguments, opened here
#                              before the uid changes, as fd 9 (empty: SANDBOX_ISOLATION=audit,
#                              Chromium runs without bubblewrap)
#   AWORLD_BROWSER_EXECUTABLE  Chromium's binary
#   AWORLD_BROWSER_UID         the uid to run as (empty: the server is not root, no change)
# Playwright's own profile directory (--user-data-dir, made by its driver) is given to that uid and
# bound at its own path: it is the only host directory made by someone else that Chromium writes.
#
# Chromium honours only the last --disable-features (and --enable-features) switch, and Playwright
# passes its own list (which keeps Chromium from calling Google at start-up) before ours: the
# values of every such switch are joined here into one, so neither list replaces the other.
set -eu
args=${AWORLD_BROWSER_BWRAP_ARGS-}
exe=${AWORLD_BROWSER_EXECUTABLE:?the browser launcher needs AWORLD_BROWSER_EXECUTABLE}
uid=${AWORLD_BROWSER_UID:-}
unset AWORLD_BROWSER_BWRAP_ARGS AWORLD_BROWSER_EXECUTABLE AWORLD_BROWSER_UID
profile=
disabled=
enabled=
for arg do
    shift
    case $arg in
        --disable-features=*) disabled=${disabled:+$disabled,}${arg#--disable-features=} ;;
        --enable-features=*) enabled=${enabled:+$enabled,}${arg#--enable-features=} ;;
        *)
            case $arg in --user-data-dir=*) profile=${arg#--user-data-dir=} ;; esac
            set -- "$@" "$arg"
            ;;
    esac
done
if [ -n "$enabled" ]; then set -- "--enable-features=$enabled" "$@"; fi
if [ -n "$disabled" ]; then set -- "--disable-features=$disabled" "$@"; fi
if [ -z "$profile" ]; then
    echo "browser launcher: Playwright passed no --user-data-dir" >&2
    exit 125
fi
# no DNS prefetch or preconnect from pages (the profile's preference; Chromium has no switch for
# it), no DNS-over-HTTPS probes (Local State): the browser resolves nothing on its own
mkdir -p "$profile/Default"
[ -e "$profile/Default/Preferences" ] || \
    printf '%s\n' '{"net":{"network_prediction_options":2},"dns_prefetching":{"enabled":false}}' >"$profile/Default/Preferences"
[ -e "$profile/Local State" ] || printf '%s\n' '{"dns_over_https":{"mode":"off"}}' >"$profile/Local State"
if [ -z "$args" ]; then
    exec "$exe" "$@"
fi
if [ -n "$uid" ]; then
    chown -R "$uid:$uid" "$profile"
    exec setpriv --reuid="$uid" --regid="$uid" --clear-groups -- \
        bwrap --args 9 --bind "$profile" "$profile" --remount-ro / -- "$exe" "$@" 9<"$args"
fi
exec bwrap --args 9 --bind "$profile" "$profile" --remount-ro / -- "$exe" "$@" 9<"$args"
