#!/usr/bin/env bash
# Install everything stasis needs on a fresh Debian machine, idempotently:
# Debian packages, (with --tests) the local S3-compatible test server, and
# the microVM guest image. Safe to run again: it only does what is missing.
#
#   scripts/setup.sh [--tests] [--no-guest]
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TESTS=0
GUEST=1
for a in "$@"; do
    case "$a" in
        --tests) TESTS=1 ;;
        --no-guest) GUEST=0 ;;
        *) echo "setup: unknown option $a" >&2; exit 2 ;;
    esac
done

START=$SECONDS
log() { printf '[setup %4ss] %s\n' "$((SECONDS - START))" "$*" >&2; }

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: run as root (or install sudo)" >&2; exit 1; }
    SUDO=(sudo)
fi

# Host tools: QEMU and qemu-img (microVM backend), the guest image build
# (debootstrap, busybox, mkfs.ext4, cpio, xz, kmod), iproute2/util-linux/procps
# (process backend and its tests), nftables (egress allowlists of process sandboxes), python3 (the default process sandbox's interpreter).
APT_PACKAGES=(qemu-system-x86 qemu-utils busybox-static debootstrap e2fsprogs cpio
    xz-utils zstd kmod b3sum iproute2 util-linux procps python3 python3-venv ca-certificates nftables)
if ((TESTS)); then
    # PostgreSQL server binaries for the metadata and multi-node tests
    # (scripts/pg-test-server.sh starts a throwaway cluster on loopback).
    APT_PACKAGES+=(postgresql)
fi
not_installed() {
    local p out=()
    for p in "$@"; do
        dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || out+=("$p")
    done
    echo "${out[*]}"
}
missing=$(not_installed "${APT_PACKAGES[@]}")
if [[ -n $missing ]]; then
    log "installing Debian packages: $missing"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -q
    # The whole list, not only what is missing: packages built from one
    # source (qemu-system-x86, qemu-utils) must move to the same version, and
    # asked for one alone apt would rather remove an older sibling.
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${APT_PACKAGES[@]}"
    still=$(not_installed "${APT_PACKAGES[@]}")
    [[ -z $still ]] || { echo "setup: apt-get left these packages uninstalled: $still" >&2; exit 1; }
else
    log "Debian packages present"
fi

if ((TESTS)); then
    # A real S3-compatible server for the store's S3 tests, on loopback.
    if ! command -v moto_server >/dev/null 2>&1; then
        log "installing moto[server] (S3-compatible test server) from PyPI"
        python3 -m pip install -q 'moto[server]'
        command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
    else
        log "moto_server present"
    fi
fi

if ((TESTS)); then
    # The Python client and its test dependencies (the pinned Agents SDK,
    # pytest) in a virtualenv inside the repository (.venv, git-ignored).
    # Editable install: source changes need no reinstall; a changed
    # pyproject.toml does (its hash is the stamp).
    VENV="$REPO/.venv"
    stamp=$(sha256sum "$REPO/clients/python/pyproject.toml" | cut -d' ' -f1)
    if [[ ! -x "$VENV/bin/python" ]]; then
        log "creating the Python virtualenv $VENV"
        python3 -m venv "$VENV"
    fi
    if [[ "$(cat "$VENV/.stasis-client-stamp" 2>/dev/null)" != "$stamp" ]]; then
        log "installing the Python client with its test dependencies into $VENV"
        "$VENV/bin/python" -m pip install -q -e "$REPO/clients/python[agents,test]"
        echo "$stamp" >"$VENV/.stasis-client-stamp"
    else
        log "Python client and test dependencies present"
    fi
fi

if ((GUEST)); then
    log "building the microVM guest image (cached; only what changed is rebuilt)"
    "$REPO/scripts/build-guest-image.sh"
fi
log "done"
