#!/usr/bin/env bash
# Prove that setup's package step leaves ONE QEMU version across the whole
# package family from every starting point. For each starting point it puts
# this machine's QEMU packages into that state with apt (and removes the apt
# source and pin that setup writes, as on a machine that never ran it), runs
# `scripts/setup.sh --packages-only`, and checks the family's versions.
#
#   scripts/check-install.sh [START ...]
#
# Starting points (default: all, in this order):
#   none        no QEMU package installed
#   bookworm    the family at bookworm's 7.2
#   utils10     only qemu-utils 10 from bookworm-backports (the base image's state)
#   mix         qemu-system-* at 10 from backports beside qemu-utils at 7.2
#
# It changes this machine's packages (as root) and ends in the state setup
# leaves, so it is safe to run on a development machine or in CI; it needs the
# package registry. Prints one line per starting point and exits non-zero if any failed.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ $(id -u) -eq 0 ]] || { echo "check-install: run as root" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
SUITE=bookworm-backports
OURS=(/etc/apt/sources.list.d/stasis-$SUITE.sources /etc/apt/preferences.d/stasis-qemu)
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT

family() {
    dpkg-query -W -f='${db:Status-Status} ${Package} ${source:Package} ${Version}\n' 2>/dev/null |
        awk '$1 == "installed" && $3 == "qemu" { print $2 "=" $4 }' | sort
}
# The version apt offers for qemu-system-x86 from suite $1.
version_in() {
    apt-cache madison qemu-system-x86 | awk -F'|' -v s=" $1/" 'index($3, s) { gsub(/ /, "", $2); print $2; exit }'
}
apt_q() { apt-get -y -q -o Dpkg::Use-Pty=0 --no-install-recommends "$@" >>"$LOG/apt" 2>&1; }

# Make sure both suites are known while the starting points are built.
"$REPO/scripts/setup.sh" --packages-only >"$LOG/setup0" 2>&1 || { cat "$LOG/setup0" >&2; exit 1; }
V10=$(version_in "$SUITE")
V72=$(version_in bookworm)
[[ -n $V10 && -n $V72 ]] || { echo "check-install: apt lists lack qemu-system-x86 in $SUITE ($V10) or bookworm ($V72)" >&2; exit 1; }

start() {
    apt_q purge 'qemu-system-*' qemu-utils qemu-block-extra || true
    case "$1" in
        none) ;;
        bookworm)
            apt_q install --allow-downgrades qemu-system-x86="$V72" qemu-system-common="$V72" \
                qemu-system-data="${V72%+b*}" qemu-utils="$V72" qemu-block-extra="$V72" ;;
        utils10) apt_q install qemu-utils="$V10" ;;
        mix)
            apt_q install qemu-system-x86="$V10" qemu-system-common="$V10" qemu-system-data="$V10" \
                qemu-utils="$V72" ;;
        *) echo "check-install: unknown starting point $1" >&2; exit 2 ;;
    esac
    rm -f "${OURS[@]}"
    apt-get update -q >>"$LOG/apt" 2>&1
}

fails=0
for s in "${@:-none bookworm utils10 mix}"; do
    for point in $s; do
        t0=$SECONDS
        if ! start "$point"; then
            echo "check-install: $point: could not build the starting point (see apt log)"; tail -5 "$LOG/apt"
            fails=$((fails + 1)); continue
        fi
        before=$(family | tr '\n' ' ')
        if "$REPO/scripts/setup.sh" --packages-only >"$LOG/setup" 2>&1; then
            after=$(family)
            n=$(cut -d= -f2 <<<"$after" | sort -u | wc -l)
            if [[ $n -eq 1 && $after == *qemu-system-x86=* && $after == *qemu-utils=* ]]; then
                echo "check-install: $point: ok in $((SECONDS - t0)) s; before: ${before:-nothing}; after: one version $(cut -d= -f2 <<<"$after" | head -1) across $(wc -l <<<"$after") packages"
                continue
            fi
            echo "check-install: $point: FAILED: after setup the family is $(tr '\n' ' ' <<<"$after")"
        else
            echo "check-install: $point: FAILED: setup exited non-zero: $(tail -1 "$LOG/setup")"
        fi
        fails=$((fails + 1))
    done
done
exit $((fails > 0))
