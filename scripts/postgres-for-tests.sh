#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the task-service tests, on 127.0.0.1 only.
#
#   scripts/postgres-for-tests.sh          start (or reuse) it; print its URL
#   scripts/postgres-for-tests.sh stop     stop it
#
# Installs Debian's postgresql package with apt-get when no server binaries are found (needs
# root). The cluster lives in .stamps/postgres/ (git-ignored; /var/tmp/aworld-postgres-<checksum
# of the checkout path> when the 'postgres' user cannot enter the checkout), runs as the 'postgres' user
# (PostgreSQL refuses to run as root), listens on a free port, trusts local connections (it is
# a test server on loopback), and has a database 'aworld_test'. Its URL is printed and written
# to .stamps/postgres.url, where tests/service reads it (AWORLD_TEST_POSTGRES_URL wins when set);
# the path of its unix socket goes to .stamps/postgres.socket, through which
# scripts/offline-run.sh reaches it from a test suite's own network namespace.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STAMPS="${AWORLD_STAMPS:-$ROOT/.stamps}"
BASE="$STAMPS/postgres"
DATA="$BASE/data"
SOCK="$BASE/sock"
LOG="$BASE/server.log"
URL_FILE="$STAMPS/postgres.url"
SOCKET_FILE="$STAMPS/postgres.socket"
DB=aworld_test
PG_USER=postgres

say() { echo "postgres-for-tests: $*" >&2; }

find_bindir() {
    local dir
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        pg_config --bindir
        return 0
    fi
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}

as_pg() {
    if [ "$(id -u)" = 0 ]; then
        if command -v runuser >/dev/null 2>&1; then
            runuser -u "$PG_USER" -- "$@"
        else
            su -s /bin/sh "$PG_USER" -c "$(printf '%q ' "$@")"
        fi
    else
        "$@"
    fi
}

use_base() {
    BASE="$1"
    DATA="$BASE/data"
    SOCK="$BASE/sock"
    LOG="$BASE/server.log"
}

# where the cluster goes when the 'postgres' user cannot enter the checkout (a clone under a
# directory only root may enter, such as one made by mktemp -d, mode 0700)
OUTSIDE="/var/tmp/aworld-postgres-$(printf %s "$ROOT" | cksum | cut -d' ' -f1)"

BINDIR="$(find_bindir || true)"

if [ "${1:-start}" = stop ]; then
    for base in "$BASE" "$OUTSIDE"; do
        if [ -n "$BINDIR" ] && [ -f "$base/data/postmaster.pid" ]; then
            as_pg "$BINDIR/pg_ctl" -D "$base/data" -m fast -w stop >&2 || true
        fi
    done
    rm -f "$URL_FILE" "$SOCKET_FILE"
    exit 0
fi

if [ -z "$BINDIR" ]; then
    if [ "$(id -u)" != 0 ]; then
        say "no PostgreSQL server binaries found and not root: install Debian's 'postgresql' package"
        exit 1
    fi
    say "installing PostgreSQL with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
    BINDIR="$(find_bindir)" || { say "apt-get installed postgresql but no initdb was found"; exit 1; }
fi

if [ "$(id -u)" = 0 ] && ! id "$PG_USER" >/dev/null 2>&1; then
    useradd --system --home-dir "$BASE" --shell /bin/sh "$PG_USER"
fi

mkdir -p "$BASE" "$SOCK"
if [ "$(id -u)" = 0 ]; then
    chown "$PG_USER" "$BASE" "$SOCK"
    if ! as_pg test -w "$BASE" 2>/dev/null; then
        say "the '$PG_USER' user cannot enter $BASE (a parent directory is closed to it); the cluster goes in $OUTSIDE"
        use_base "$OUTSIDE"
        mkdir -p "$BASE" "$SOCK"
        chown "$PG_USER" "$BASE" "$SOCK"
        chmod 700 "$BASE"
    fi
fi

if [ ! -f "$DATA/PG_VERSION" ]; then
    say "creating a cluster in $DATA"
    as_pg "$BINDIR/initdb" -D "$DATA" -U "$PG_USER" --auth=trust --encoding=UTF8 --no-locale >"$BASE/initdb.log" 2>&1 \
        || { say "initdb failed:"; cat "$BASE/initdb.log" >&2; exit 1; }
fi

port_of_running() {
    # the port is line 4 of postmaster.pid while the server runs
    if as_pg "$BINDIR/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
        sed -n 4p "$DATA/postmaster.pid"
    fi
}

PORT="$(port_of_running || true)"
if [ -z "$PORT" ]; then
    PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    say "starting PostgreSQL on 127.0.0.1:$PORT"
    as_pg "$BINDIR/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k $SOCK -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" >&2 \
        || { say "the server did not start; its log:"; tail -n 30 "$LOG" >&2; exit 1; }
fi

PSQL="$BINDIR/psql"
if ! as_pg "$PSQL" -h 127.0.0.1 -p "$PORT" -U "$PG_USER" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1; then
    as_pg "$PSQL" -h 127.0.0.1 -p "$PORT" -U "$PG_USER" -d postgres -qc "CREATE DATABASE $DB" >&2
fi

URL="postgresql://$PG_USER@127.0.0.1:$PORT/$DB"
echo "$URL" >"$URL_FILE"
echo "$SOCK/.s.PGSQL.$PORT" >"$SOCKET_FILE"
echo "$URL"
