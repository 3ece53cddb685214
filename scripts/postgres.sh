#!/usr/bin/env bash
# A throw-away PostgreSQL server for the tests: Debian's `postgresql`
# (installed when missing), a new cluster in a temporary directory, on a
# free port of 127.0.0.1, stopped and removed when the command ends.
#
#   scripts/postgres.sh COMMAND [ARGS...]
#
# runs COMMAND with ACTUM_PG_URL naming the server (the tests connect to it
# and make a database of their own in it) and ACTUM_PG_REQUIRED=1 (a test
# that finds no server fails instead of saying it skipped). With
# ACTUM_PG_URL already set, COMMAND runs against that server instead and no
# server is started.
#
# PostgreSQL refuses to run as root: as root, the cluster belongs to the
# `postgres` user the package creates, and the server runs as that user.
set -euo pipefail

if [ $# -eq 0 ]; then
    echo "usage: scripts/postgres.sh COMMAND [ARGS...]" >&2
    exit 2
fi
if [ -n "${ACTUM_PG_URL:-}" ]; then
    echo "postgres.sh: using the server ACTUM_PG_URL names" >&2
    ACTUM_PG_REQUIRED=1 exec "$@"
fi

bin_dir() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}
BIN=$(bin_dir)
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
    echo "postgres.sh: no PostgreSQL server on this machine; installing Debian's postgresql" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    BIN=$(bin_dir)
fi

as_owner=()
if [ "$(id -u)" -eq 0 ]; then
    as_owner=(setpriv --reuid=postgres --regid=postgres --init-groups --)
fi

DIR=$(mktemp -d /tmp/actum-pg.XXXXXX)
chmod 0755 "$DIR"
[ "$(id -u)" -eq 0 ] && chown postgres:postgres "$DIR"

stop() {
    "${as_owner[@]}" "$BIN/pg_ctl" -D "$DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$DIR"
}
trap stop EXIT

# Trust on loopback only: the cluster lives for one test command. fsync
# stays on, so the server's durability is the one users get.
"${as_owner[@]}" "$BIN/initdb" -D "$DIR/data" -U actum --auth=trust -E UTF8 \
    --no-instructions >"$DIR/initdb.log" 2>&1 || {
    cat "$DIR/initdb.log" >&2
    exit 1
}
# A free port: one nothing answers on, tried from a point this process
# picks; a server that still fails to start there (a race with another
# program) moves on to the next.
PORT=$((20000 + $$ % 20000))
started=
for _ in $(seq 1 20); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null &&
        "${as_owner[@]}" "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -o \
            "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=200" \
            start >/dev/null 2>&1; then
        started=1
        break
    fi
    PORT=$((PORT + 1))
done
if [ -z "$started" ]; then
    echo "postgres.sh: the server did not start; its log:" >&2
    cat "$DIR/server.log" >&2
    exit 1
fi
echo "postgres.sh: PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT ($DIR)" >&2

export ACTUM_PG_URL="postgres://actum@127.0.0.1:$PORT/postgres"
export ACTUM_PG_REQUIRED=1
# Tests that crash the server (`pg_ctl stop -m immediate`) and start it
# again find it here.
export ACTUM_PG_DATA="$DIR/data"
export ACTUM_PG_BIN="$BIN"
export ACTUM_PG_PORT="$PORT"
"$@"
