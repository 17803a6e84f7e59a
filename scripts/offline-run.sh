#!/usr/bin/env bash
# Run a command with no route beyond loopback: in a network namespace of its own whose only
# interface is lo (up). Whatever the command or the libraries under it do -- telemetry, hub
# lookups, DNS prefetch, background services -- nothing can leave the machine: a connect or a DNS
# query to any address but 127.0.0.0/8 or ::1 fails at once with ENETUNREACH.
#
#   scripts/offline-run.sh [--best-effort] [--trace DIR] [--forward PORT=UNIX_SOCKET]... -- CMD [ARG...]
#
# make test runs every test command through it (the installs before stay outside: they need the
# index). How the namespace is made:
#   - root:      unshare --net, then lo up (CI: make test runs as root, as make sysdeps assumes);
#   - not root:  unshare --user --map-root-user --net, lo up, then a nested user namespace maps
#                the caller's own uid/gid back, so the command runs as the caller (not as a
#                namespace root, which the GAIA sandbox would take for real root);
#   - neither possible (no unshare, user namespaces disabled): an error, exit 2. Setting
#     AWORLD_TEST_NETWORK=host runs the command on the host's network instead, after a loud
#     warning; --best-effort (make demo) does the same without the variable.
#   - already in such a namespace (only lo): the command runs as it is.
# Servers started before on the host's loopback are unreachable by TCP inside; unix sockets cross
# namespaces, so the PostgreSQL test server (scripts/postgres-for-tests.sh, its port and socket
# in .stamps/) is forwarded automatically: 127.0.0.1:PORT inside -> its unix socket
# (scripts/loopback_bridge.py). --forward adds others.
#
# After the command: the namespace's interfaces are listed with their packet counters (only lo,
# so no packet can have left) and the command's exit status is returned. --trace DIR also runs
# it under strace (connect/sendto/sendmsg/sendmmsg, execve and process creation of every thread,
# one file per thread in DIR) and lists every attempt to reach an address beyond loopback, and
# by which program (scripts/offline_trace.py); a call beyond loopback that succeeded fails the run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/scripts/offline-run.sh"
STAMPS="${AWORLD_STAMPS:-$ROOT/.stamps}"
ARGS=("$@")

say() { echo "offline-run: $*" >&2; }
usage() {
    say "usage: scripts/offline-run.sh [--best-effort] [--trace DIR] [--forward PORT=UNIX_SOCKET]... -- CMD [ARG...]"
    exit 2
}

BEST_EFFORT=0
TRACE=
FORWARDS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --best-effort) BEST_EFFORT=1; shift ;;
        --trace) [ $# -ge 2 ] || usage; TRACE="$2"; shift 2 ;;
        --forward) [ $# -ge 2 ] || usage; FORWARDS+=("$2"); shift 2 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || usage

interfaces() { awk -F: 'NR > 2 { gsub(/ /, "", $1); print $1 }' /proc/net/dev | tr '\n' ' ' | sed 's/ $//'; }

lo_up() {
    if command -v ip >/dev/null 2>&1; then
        ip link set lo up
    else  # no iproute2: SIOCGIFFLAGS / SIOCSIFFLAGS with IFF_UP
        python3 -c '
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, struct.pack("16sH14s", b"lo", 0, b"")))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 1, b""))'
    fi
}

# lo's counters: "rx_packets tx_packets"
lo_packets() { awk -F'[: ]+' '$2 == "lo" { print $4, $12 }' /proc/net/dev; }

STAGE="${AWORLD_OFFLINE_STAGE:-outer}"
unset AWORLD_OFFLINE_STAGE
MADE_NAMESPACE=1

if [ "$STAGE" = outer ]; then
    if [ "$(interfaces)" = lo ]; then
        STAGE=inner  # already isolated (a nested call, or a machine with loopback only)
        MADE_NAMESPACE=0  # so the host's servers on 127.0.0.1 are (or are forwarded) here already
    elif [ "$(id -u)" = 0 ] && unshare --net true 2>/dev/null; then
        exec unshare --net -- env AWORLD_OFFLINE_STAGE=lo "$SELF" "${ARGS[@]}"
    elif unshare --user --map-root-user --net true 2>/dev/null \
            && unshare --help 2>/dev/null | grep -q -- '--map-user'; then  # --map-user: util-linux >= 2.38
        exec unshare --user --map-root-user --net -- env AWORLD_OFFLINE_STAGE=userns \
            AWORLD_OFFLINE_UID="$(id -u)" AWORLD_OFFLINE_GID="$(id -g)" "$SELF" "${ARGS[@]}"
    elif [ "${AWORLD_TEST_NETWORK:-}" = host ] || [ "$BEST_EFFORT" = 1 ]; then
        bar="$(printf '!%.0s' $(seq 1 78))"
        say "$bar"
        say "WARNING: no network namespace could be made (not root, and 'unshare --user --net' failed),"
        say "so '$*' runs on the host's network: nothing but the processes' own opt-outs keeps"
        say "their traffic on loopback. Run as root, or enable unprivileged user namespaces"
        say "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0)."
        say "$bar"
        exec "$@"
    else
        say "cannot make a network namespace with only loopback for '$*':"
        say "not root, and 'unshare --user --map-root-user --net' failed (user namespaces disabled?)"
        say "or this unshare has no --map-user (util-linux < 2.38)."
        say "Run as root (as CI does), enable unprivileged user namespaces, or set"
        say "AWORLD_TEST_NETWORK=host to run on the host's network anyway (not offline; a loud warning)."
        exit 2
    fi
fi

if [ "$STAGE" = userns ]; then  # namespace root for a moment: lo up, then back to the caller's ids
    lo_up
    exec unshare --user --map-user="$AWORLD_OFFLINE_UID" --map-group="$AWORLD_OFFLINE_GID" -- \
        env -u AWORLD_OFFLINE_UID -u AWORLD_OFFLINE_GID AWORLD_OFFLINE_STAGE=inner "$SELF" "${ARGS[@]}"
fi
if [ "$STAGE" = lo ]; then
    lo_up
fi

# --- inside: only lo -------------------------------------------------------------------------
found="$(interfaces)"
if [ "$found" != lo ]; then
    say "expected a namespace with only lo, found: $found"
    exit 1
fi
export AWORLD_OFFLINE_NETNS=1  # tests/conftest.py and tests/core/test_offline_namespace.py read it

# the PostgreSQL test server: its URL's port on 127.0.0.1 here -> its unix socket
if [ "$MADE_NAMESPACE" = 1 ] && [ -f "$STAMPS/postgres.url" ] && [ -f "$STAMPS/postgres.socket" ]; then
    pg_port="$(sed -n 's#.*@127\.0\.0\.1:\([0-9]*\)/.*#\1#p' "$STAMPS/postgres.url")"
    pg_socket="$(cat "$STAMPS/postgres.socket")"
    if [ -n "$pg_port" ] && [ -S "$pg_socket" ]; then
        FORWARDS+=("$pg_port=$pg_socket")
    fi
fi

BRIDGE_PID=
stop_bridge() {
    if [ -n "$BRIDGE_PID" ]; then
        kill "$BRIDGE_PID" 2>/dev/null || true
        wait "$BRIDGE_PID" 2>/dev/null || true
        BRIDGE_PID=
    fi
}
trap stop_bridge EXIT
if [ "${#FORWARDS[@]}" -gt 0 ]; then
    ready="$(mktemp)"
    python3 "$ROOT/scripts/loopback_bridge.py" "${FORWARDS[@]}" >"$ready" &
    BRIDGE_PID=$!
    for _ in $(seq 1 100); do
        grep -q ready "$ready" && break
        kill -0 "$BRIDGE_PID" 2>/dev/null || break
        sleep 0.05
    done
    if grep -q ready "$ready"; then
        say "forwarding 127.0.0.1 -> unix socket: ${FORWARDS[*]}"
    else
        say "WARNING: the loopback bridge did not start (${FORWARDS[*]}); those servers are unreachable here"
        BRIDGE_PID=
    fi
    rm -f "$ready"
fi

read -r rx0 tx0 <<<"$(lo_packets)"
set +e
if [ -n "$TRACE" ]; then
    command -v strace >/dev/null 2>&1 || { say "--trace needs strace (apt-get install strace)"; exit 2; }
    rm -rf "$TRACE"
    mkdir -p "$TRACE"
    opts=()  # child pids inside a pid namespace (bubblewrap's) translated, so lineages hold;
    # a seccomp filter stops only the traced calls (without it every system call of every thread
    # stops in strace: a training run is ~50x slower)
    if strace -h 2>&1 | grep -q -- '--decode-pids'; then opts+=(--decode-pids=pidns); fi
    if strace -h 2>&1 | grep -q -- '--seccomp-bpf'; then opts+=(--seccomp-bpf); fi
    strace -ff -qq "${opts[@]}" -e trace=connect,sendto,sendmsg,sendmmsg,execve,clone,clone3,fork,vfork \
        -o "$TRACE/trace" -- "$@"
else
    "$@"
fi
rc=$?
set -e
stop_bridge
read -r rx1 tx1 <<<"$(lo_packets)"
found="$(interfaces)"
if [ "$found" != lo ]; then
    say "an interface besides lo appeared during the run: $found"
    [ "$rc" -ne 0 ] || rc=1
fi
say "ran in a network namespace whose only interface is lo ($((tx1 - tx0)) packets over lo,"\
" no other interface): nothing could leave the machine"
if [ -n "$TRACE" ]; then
    python3 "$ROOT/scripts/offline_trace.py" "$TRACE" >&2 || { [ "$rc" -ne 0 ] || rc=1; }
fi
exit "$rc"
