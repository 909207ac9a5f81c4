#!/usr/bin/env bash
# Install everything stasis needs on a fresh Debian machine, idempotently:
# Debian packages, (with --tests) the local S3-compatible test server, and
# the microVM guest image. Safe to run again: it only does what is missing.
#
#   scripts/setup.sh [--tests] [--no-guest] [--packages-only]
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TESTS=0
GUEST=1
PACKAGES_ONLY=0
for a in "$@"; do
    case "$a" in
        --tests) TESTS=1 ;;
        --no-guest) GUEST=0 ;;
        --packages-only) PACKAGES_ONLY=1 ;;
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

# Host tools: qemu-img (microVM disks), the guest image build (debootstrap,
# busybox, mkfs.ext4, cpio, xz, kmod), iproute2/util-linux/procps (process
# backend and its tests), nftables (egress allowlists of process sandboxes),
# python3 (the default process sandbox's interpreter). QEMU itself is
# installed by the step below, as one version for its whole package family.
APT_PACKAGES=(busybox-static debootstrap e2fsprogs cpio
    xz-utils zstd kmod b3sum iproute2 util-linux procps python3 python3-venv ca-certificates nftables)
if ((TESTS)); then
    # PostgreSQL server binaries for the metadata and multi-node tests
    # (scripts/pg-test-server.sh starts a throwaway cluster on loopback).
    APT_PACKAGES+=(postgresql)
    # tmux drives `stasis shell` on a real terminal in the CLI tests.
    APT_PACKAGES+=(tmux)
fi
not_installed() {
    local p out=()
    for p in "$@"; do
        dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || out+=("$p")
    done
    echo "${out[*]}"
}
APT_UPDATED=0
apt_update() {
    ((APT_UPDATED)) && return 0
    "${SUDO[@]}" apt-get update -q || { echo "setup: apt-get update failed" >&2; exit 1; }
    APT_UPDATED=1
}
export DEBIAN_FRONTEND=noninteractive

# QEMU: one version for the whole family, from bookworm-backports.
#
# Why 10.x from backports and not bookworm's 7.2: the base image of this
# project's machines ships qemu-utils 10 from bookworm-backports, and
# qemu-utils 10 Breaks qemu-system-common < 8, so bookworm's qemu-system-x86
# cannot sit beside it; staying on 10 keeps what the image ships instead of
# downgrading it. QEMU 10 also brings the mapped-ram/multifd file migration
# and direct-io that faster pause and restore build on. Every package built
# from the qemu source that is installed (qemu-system-x86, -common, -data,
# -gui, -modules-*, qemu-utils, qemu-block-extra, ...) is set to exactly the
# version backports offers, downgrading or upgrading whatever was there, and
# seabios comes from backports too (QEMU 10 needs > 1.16.3). A pin keeps a
# later `apt-get upgrade` from splitting the family again. debian.sources is
# never edited: the backports source is a file of its own.
QEMU_SUITE=bookworm-backports
QEMU_SOURCES=/etc/apt/sources.list.d/stasis-$QEMU_SUITE.sources
QEMU_PIN=/etc/apt/preferences.d/stasis-qemu
QEMU_REQUIRED=(qemu-system-x86 qemu-system-common qemu-system-data qemu-utils qemu-block-extra)
# Installed packages built from the qemu source, "name version" a line.
qemu_family_installed() {
    dpkg-query -W -f='${db:Status-Status} ${Package} ${source:Package} ${Version}\n' 2>/dev/null |
        awk '$1 == "installed" && $3 == "qemu" { print $2, $4 }'
}
qemu_consistent() {
    local fam versions
    fam=$(qemu_family_installed)
    [[ -z $(not_installed "${QEMU_REQUIRED[@]}") ]] || return 1
    versions=$(awk '{ print $2 }' <<<"$fam" | sort -u)
    [[ $(wc -l <<<"$versions") -eq 1 ]] || return 1
    # The version setup chose: from backports (its "~bpo" suffix), 10 or newer.
    [[ $versions == *bpo* ]] && dpkg --compare-versions "$versions" ge 1:10 && [[ -f $QEMU_PIN ]]
}
if qemu_consistent; then
    log "QEMU $(qemu_family_installed | awk 'NR==1 { print $2 }') present (one version across its family)"
else
    if ! grep -rqsE "^(Suites:.*[[:space:]]|deb .*[[:space:]])$QEMU_SUITE([[:space:]]|$)" \
        /etc/apt/sources.list /etc/apt/sources.list.d/; then
        log "adding the $QEMU_SUITE apt source ($QEMU_SOURCES)"
        "${SUDO[@]}" tee "$QEMU_SOURCES" >/dev/null <<SRC
# Written by stasis scripts/setup.sh: QEMU comes from here (see its pin file $QEMU_PIN).
Types: deb
URIs: http://deb.debian.org/debian
Suites: $QEMU_SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        APT_UPDATED=0
    fi
    "${SUDO[@]}" tee "$QEMU_PIN" >/dev/null <<PIN
# Written by stasis scripts/setup.sh: the whole QEMU family (and seabios, which it
# needs) from $QEMU_SUITE, so that one version is installed across it.
Package: qemu-* seabios
Pin: release n=$QEMU_SUITE
Pin-Priority: 990
PIN
    apt_update
    qv=$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ { print $2; exit }')
    if [[ -z $qv || $qv == "(none)" || $qv != *bpo* ]]; then
        echo "setup: apt offers no qemu-system-x86 from $QEMU_SUITE (candidate: ${qv:-none}); cannot install QEMU" >&2
        exit 1
    fi
    sv=$(apt-cache policy seabios | awk '/Candidate:/ { print $2; exit }')
    want=("${QEMU_REQUIRED[@]}")
    while read -r pkg _; do
        [[ -n $pkg && " ${want[*]} " != *" $pkg "* ]] && want+=("$pkg")
    done < <(qemu_family_installed)
    args=()
    for p in "${want[@]}"; do args+=("$p=$qv"); done
    log "installing QEMU $qv for its whole family: ${want[*]}"
    if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends --allow-downgrades \
        "${args[@]}" "seabios=$sv" >/tmp/stasis-setup-apt.log 2>&1; then
        tail -n 20 /tmp/stasis-setup-apt.log >&2
        echo "setup: apt-get could not install QEMU $qv across its family (log above, whole log in /tmp/stasis-setup-apt.log)" >&2
        exit 1
    fi
    if ! qemu_consistent; then
        echo "setup: after installing, the QEMU family is not one version: $(qemu_family_installed | tr '\n' ' ')" >&2
        exit 1
    fi
fi

missing=$(not_installed "${APT_PACKAGES[@]}")
if [[ -n $missing ]]; then
    log "installing Debian packages: $missing"
    apt_update
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends $missing
    still=$(not_installed "${APT_PACKAGES[@]}")
    [[ -z $still ]] || { echo "setup: apt-get left these packages uninstalled: $still" >&2; exit 1; }
else
    log "Debian packages present"
fi
((PACKAGES_ONLY)) && { log "done (packages only)"; exit 0; }

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
    # The pinned E2B SDKs (clients/e2b/python/requirements.txt) whose own
    # tests, ported, run against the daemon (clients/e2b/python).
    if ! "$VENV/bin/python" - "$REPO/clients/e2b/python/requirements.txt" <<'PY' 2>/dev/null; then
import importlib.metadata as m, sys
for line in open(sys.argv[1]):
    name, _, version = line.strip().partition("==")
    if name and m.version(name) != version:
        sys.exit(1)
PY
        log "installing the pinned E2B SDKs into $VENV"
        "$VENV/bin/python" -m pip install -q -r "$REPO/clients/e2b/python/requirements.txt"
    else
        log "E2B SDKs present"
    fi
    # The Agents SDK's own tests (its sdist, cached in .cache/sdk_suite) for
    # clients/python/sdk_suite/run.py.
    "$VENV/bin/python" "$REPO/clients/python/sdk_suite/run.py" --fetch-only
fi

if ((TESTS)); then
    # The console's browser tests: Debian's headless Chromium with its
    # driver (and a font for its screenshots), and Selenium (PyPI) in the
    # same virtualenv.
    browser_missing=$(not_installed chromium chromium-driver fonts-liberation)
    if [[ -n $browser_missing ]]; then
        log "installing Debian packages for the console tests: $browser_missing"
        apt_update
        "${SUDO[@]}" apt-get install -y -q --no-install-recommends $browser_missing
    else
        log "chromium and chromium-driver present"
    fi
    if ! "$REPO/.venv/bin/python" -c 'import selenium' 2>/dev/null; then
        log "installing selenium (console browser tests) into $REPO/.venv"
        "$REPO/.venv/bin/python" -m pip install -q 'selenium>=4.20,<5'
    else
        log "selenium present"
    fi
    # Node packages from their package-lock.json files: the TypeScript
    # client's (the pinned Agents SDK, tsc, openapi-typescript) and the
    # ported E2B SDK suite's (the pinned e2b SDKs, vitest). Each lock's hash
    # is its stamp. Node 20+ and npm come with the machine.
    command -v npm >/dev/null || { echo "setup: npm (Node 20+) is needed for the JavaScript clients and suites" >&2; exit 1; }
    for pkg in clients/typescript clients/e2b/js; do
        dir="$REPO/$pkg"
        stamp=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
        if [[ "$(cat "$dir/node_modules/.stasis-stamp" 2>/dev/null)" != "$stamp" ]]; then
            log "installing $pkg's dependencies (npm ci)"
            (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
            echo "$stamp" >"$dir/node_modules/.stasis-stamp"
        else
            log "$pkg dependencies present"
        fi
    done
fi

if ((TESTS)); then
    # The Kubernetes manifests (deploy/kubernetes) are rendered by Debian's
    # kubectl (kubernetes-client) and validated offline by
    # scripts/check-kubernetes.sh. The package is unpacked into target/tools,
    # not installed: a kubectl of another origin may own /usr/bin/kubectl.
    KUBECTL_DIR="$REPO/target/tools/kubernetes-client"
    if [[ -x $KUBECTL_DIR/usr/bin/kubectl ]]; then
        log "Debian kubectl present"
    else
        log "unpacking Debian's kubernetes-client into $KUBECTL_DIR"
        apt_update
        deb_dir=$(mktemp -d)
        chmod 1777 "$deb_dir" # apt's download user writes there
        (cd "$deb_dir" && apt-get download -q kubernetes-client)
        mkdir -p "$KUBECTL_DIR"
        dpkg-deb -x "$deb_dir"/kubernetes-client_*.deb "$KUBECTL_DIR"
        rm -rf "$deb_dir"
    fi
    # The Kubernetes API schemas the check validates against (no cluster).
    if ! "$REPO/.venv/bin/python" -c 'import kubernetes_validate' 2>/dev/null; then
        log "installing kubernetes-validate into $REPO/.venv"
        "$REPO/.venv/bin/python" -m pip install -q 'kubernetes-validate>=1.29,<2'
    else
        log "kubernetes-validate present"
    fi
fi

if ((TESTS)); then
    # The book under docs/: mdbook, pinned, built from crates.io with cargo
    # into target/tools (beside the rest of the build, git-ignored) and
    # skipped when that version is there. Only the search feature: the
    # book is built, never served or watched, by the tests.
    MDBOOK_VERSION=0.5.4
    MDBOOK="$REPO/target/tools/bin/mdbook"
    if [[ "$("$MDBOOK" --version 2>/dev/null)" == "mdbook v$MDBOOK_VERSION" ]]; then
        log "mdbook $MDBOOK_VERSION present"
    else
        command -v cargo >/dev/null || { echo "setup: cargo is needed to build mdbook" >&2; exit 1; }
        log "building mdbook $MDBOOK_VERSION into $REPO/target/tools (cargo install)"
        cargo install mdbook --locked --version "$MDBOOK_VERSION" --force \
            --no-default-features --features search --root "$REPO/target/tools" -q
        [[ "$("$MDBOOK" --version 2>/dev/null)" == "mdbook v$MDBOOK_VERSION" ]] ||
            { echo "setup: $MDBOOK is not mdbook $MDBOOK_VERSION after installing it" >&2; exit 1; }
    fi
fi

if ((TESTS)); then
    # The code interpreter server's tests run a real Jupyter kernel and parse
    # its stream with the E2B SDK's own parser (pinned as in its image).
    if ! "$REPO/.venv/bin/python" -c 'import jupyter_client, ipykernel, matplotlib, pandas, e2b_code_interpreter' 2>/dev/null; then
        log "installing the code interpreter's test dependencies into $REPO/.venv"
        "$REPO/.venv/bin/python" -m pip install -q jupyter_client==8.10.0 ipykernel==7.4.0 \
            matplotlib==3.11.2 pandas==3.1.1 e2b-code-interpreter==2.11.5
    else
        log "code interpreter test dependencies present"
    fi
fi

if ((GUEST)); then
    log "building the microVM guest image (cached; only what changed is rebuilt)"
    "$REPO/scripts/build-guest-image.sh"
    if ((TESTS)); then
        # The code interpreter image, FROM the base just built, with the
        # daemon's own Dockerfile support (cached by a hash of its sources).
        log "building the code interpreter image (cached)"
        (cd "$REPO" && cargo build --locked -q -p stasis-cli --bin stasis)
        "$REPO/scripts/build-code-interpreter.sh"
    fi
fi
log "done"
