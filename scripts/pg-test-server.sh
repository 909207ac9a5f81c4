#!/usr/bin/env bash
# Start a throwaway PostgreSQL cluster on loopback for the tests and print its
# admin URL (export it as STASIS_TEST_PG_URL). initdb/postgres refuse to run
# as root, so when root the cluster belongs to the `postgres` user. Trust
# authentication on 127.0.0.1 only; the cluster lives in a directory under
# ${TMPDIR:-/tmp} and is stopped by `scripts/pg-test-server.sh stop DIR`.
#
#   read -r url dir < <(scripts/pg-test-server.sh start)   # "postgres://postgres@127.0.0.1:PORT/postgres DIR"
#   scripts/pg-test-server.sh stop /tmp/stasis-pg.XXXX
set -euo pipefail
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[[ -x "$PGBIN/initdb" ]] || { echo "pg-test-server: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }
as_pg() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "${1:-start}" in
start)
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stasis-pg.XXXXXX")
    [[ $(id -u) -eq 0 ]] && chown postgres: "$dir" && chmod 700 "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    as_pg "$PGBIN/initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=300" start >/dev/null \
        || { cat "$dir/server.log" >&2; exit 1; }
    echo "$dir" >"$dir/dir"
    echo "postgres://postgres@127.0.0.1:$port/postgres $dir"
    ;;
stop)
    dir=${2:?usage: pg-test-server.sh stop DIR}
    as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
*) echo "usage: pg-test-server.sh start | stop DIR" >&2; exit 2 ;;
esac
