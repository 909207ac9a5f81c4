#!/usr/bin/env bash
# Build the code interpreter image from images/code-interpreter/ with stasis's
# own Dockerfile support, for the daemon to register as the public image
# `stasis-code-interpreter` (what the E2B code-interpreter SDKs' template
# `code-interpreter-v1` runs).
#
#   scripts/build-code-interpreter.sh [IMAGES_DIR]
#
# IMAGES_DIR (a daemon's --images) defaults to the parent of
# ${STASIS_IMAGE_DIR:-<repo>/.stasis/images/default}; its default/base-rootfs
# (scripts/build-guest-image.sh) is the FROM. The build runs in a temporary
# daemon whose RUN steps may reach PyPI only (pypi.org, files.pythonhosted.org).
# It leaves
#   IMAGES_DIR/code-interpreter/rootfs-<key>/  the image's root directory
#   IMAGES_DIR/code-interpreter/rootfs         -> rootfs-<key>
#   IMAGES_DIR/code-interpreter/config.json    the image's config (ENV, WORKDIR, CMD)
#   IMAGES_DIR/code-interpreter/build.json     key, sizes, build seconds
# Idempotent: <key> hashes images/code-interpreter/ (tests excluded) and the
# base root; nothing is rebuilt while both are unchanged.
#
# Environment:
#   STASIS_BIN   the stasis binary (default <repo>/target/debug/stasis)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE_DIR=${STASIS_IMAGE_DIR:-$REPO/.stasis/images/default}
IMAGES=${1:-$(dirname "$IMAGE_DIR")}
SRC=$REPO/images/code-interpreter
BIN=${STASIS_BIN:-$REPO/target/debug/stasis}
NAME=stasis-code-interpreter:latest
START=$SECONDS

log() { printf '[code-interpreter %4ss] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() {
    printf 'build-code-interpreter: error: %s\n' "$*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || die "must run as root (a daemon's RUN steps run in sandboxes)"
[ -x "$BIN" ] || die "no stasis binary at $BIN (cargo build, or set STASIS_BIN)"
BASE=$IMAGES/default/base-rootfs
[ -d "$BASE" ] || die "no $BASE: build the guest image first (scripts/build-guest-image.sh)"
OUT=$IMAGES/code-interpreter
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9

key=$(
    {
        echo "code-interpreter-v1"
        readlink -f "$BASE"
        (cd "$SRC" && find . -type f ! -path './tests/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z |
            xargs -0 sha256sum)
    } | sha256sum | cut -c1-16
)
if [ -d "$OUT/rootfs-$key" ] && [ "$(readlink "$OUT/rootfs")" = "rootfs-$key" ] && [ -e "$OUT/config.json" ]; then
    log "up to date ($OUT/rootfs-$key)"
    exit 0
fi

# Beside the output, so the root can be hard-linked out of the build store.
TMP=$(mktemp -d "$OUT/.build-XXXXXX")
DAEMON_PID=
cleanup() {
    if [ -n "$DAEMON_PID" ]; then
        # The daemon stops once a running RUN step is done.
        kill "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
    fi
    # Never delete through a sandbox's mounts, should one be left.
    if awk -v t="$TMP/" 'index($2, t) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
        echo "build-code-interpreter: mounts left under $TMP; not removing it" >&2
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT

log "starting a build daemon (data $TMP, images $IMAGES)"
"$BIN" serve --data-dir "$TMP/data" --images "$IMAGES" --listen 127.0.0.1:0 \
    --insecure-dev-key --ready-file "$TMP/ready" </dev/null >"$TMP/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 1 600); do
    [ -s "$TMP/ready" ] && break
    kill -0 "$DAEMON_PID" 2>/dev/null || { tail -5 "$TMP/daemon.log" >&2; die "the build daemon exited"; }
    sleep 0.2
done
[ -s "$TMP/ready" ] || die "the build daemon did not start"
export STASIS_URL="http://$(cat "$TMP/ready")"
STASIS_TOKEN=$(cat "$TMP/data/token")
export STASIS_TOKEN

log "stasis image build -t $NAME $SRC (pip from PyPI: a few minutes)"
t0=$SECONDS
"$BIN" image build -t "$NAME" --network-allow pypi.org --network-allow files.pythonhosted.org "$SRC" \
    >"$TMP/build.log" 2>&1 || { tail -30 "$TMP/build.log" >&2; die "image build failed"; }
build_s=$((SECONDS - t0))
"$BIN" image inspect "$NAME" >"$TMP/inspect.json"
hex=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"].split(":", 1)[1])' "$TMP/inspect.json")
root=$TMP/data/images-store/images/$hex/rootfs
[ -d "$root" ] || die "the built image has no root directory at $root"

log "copying the root out of the build daemon's store"
rm -rf "$OUT/rootfs-$key.tmp"
# Hard links where the store is on the same filesystem (the build shares the
# base's files that way too); a copy otherwise.
cp -al "$root" "$OUT/rootfs-$key.tmp" 2>/dev/null || {
    rm -rf "$OUT/rootfs-$key.tmp"
    cp -a "$root" "$OUT/rootfs-$key.tmp"
}
mv "$OUT/rootfs-$key.tmp" "$OUT/rootfs-$key"
python3 -c 'import json,sys; json.dump(json.load(open(sys.argv[1]))["record"]["config"], open(sys.argv[2], "w"), indent=2)' \
    "$TMP/inspect.json" "$OUT/config.json.tmp"
mv "$OUT/config.json.tmp" "$OUT/config.json"
ln -sfn "rootfs-$key" "$OUT/rootfs"
mb=$(du -sm "$OUT/rootfs-$key" | cut -f1)
base_mb=$(du -sm "$(readlink -f "$BASE")" | cut -f1)
printf '{"key": "%s", "rootfs_mb": %s, "base_rootfs_mb": %s, "build_seconds": %s}\n' \
    "$key" "$mb" "$base_mb" "$build_s" >"$OUT/build.json"
# Older builds stay: an image registered from a directory runs from it, and
# a sandbox made from an older build keeps its image (remove them by hand
# once no sandbox uses them, as with older base roots).
log "done: $NAME, root $mb MiB (base $base_mb MiB), image build ${build_s}s"
