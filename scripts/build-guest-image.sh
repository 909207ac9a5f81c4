#!/usr/bin/env bash
# Build the stasis microVM guest image from Debian packages.
#
#   scripts/build-guest-image.sh [OUT_DIR]
#
# OUT_DIR defaults to ${STASIS_IMAGE_DIR:-<repo>/.stasis/images/default} and receives
#   vmlinux       uncompressed kernel (ELF, PVH entry) from Debian's linux-image-amd64
#   initrd.img    cpio.gz: busybox-static, kernel modules, /init, the stasis-agent binary
#   rootfs.qcow2  ext4 root filesystem (debootstrap minbase + python3, pip, venv, git), qcow2
#   image.json    versions, sizes, sha256 and blake3 of each file, boot parameters
#
# Idempotent: every stage is keyed by its inputs and skipped when nothing changed
# (debootstrap result cached under ${STASIS_GUEST_CACHE:-<repo>/.stasis/cache/guest}).
# Rebuilding the agent only rebuilds initrd.img; rootfs.qcow2 is replaced only when
# the package set / suite / mirror changes (sandboxes whose qcow2 overlays point at
# the old base must not be resumed on a new base: compare image.json's sha256).
#
# Environment:
#   STASIS_IMAGE_DIR        default OUT_DIR
#   STASIS_GUEST_CACHE      cache dir (kernel package, debootstrap tree)
#   STASIS_GUEST_SUITE      Debian suite (bookworm)
#   STASIS_GUEST_PACKAGES   extra packages for the rootfs
#                           (python3,python3-pip,python3-venv,git,ca-certificates,procps)
#   STASIS_DEBIAN_MIRROR    mirror (default: the one configured for apt)
#   STASIS_ROOTFS_SIZE_MB   size of the root filesystem (default: its files + 25% + 64 MiB;
#                           each sandbox's disk adds resources.disk_mb to it, and the
#                           agent grows the filesystem to the disk at first boot)
#   STASIS_GUEST_EXTRA_CA   directory of extra CA certificates (*.crt) the rootfs trusts
#                           (default: the host's /usr/local/share/ca-certificates, e.g. a
#                           TLS-inspecting proxy's; empty: none)
#   STASIS_KERNEL_PKG       kernel package (linux-image-amd64)
#   STASIS_AGENT_BIN        use this prebuilt static agent instead of building it
#   STASIS_AGENT_TARGET_DIR cargo target dir for the agent build
#                           (default: $CARGO_TARGET_DIR or <repo>/target)
#   STASIS_SKIP_ROOTFS=1    build vmlinux + initrd.img only
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-${STASIS_IMAGE_DIR:-$REPO/.stasis/images/default}}
CACHE=${STASIS_GUEST_CACHE:-$REPO/.stasis/cache/guest}
SUITE=${STASIS_GUEST_SUITE:-bookworm}
VARIANT=minbase
# pip, venv and git: what a Dockerfile's first `RUN pip install ...` or a
# `git clone` expects of a base image; sudo, curl and `python`: what code
# written for E2B's base template takes for granted (with its user `user`,
# made below).
PACKAGES=${STASIS_GUEST_PACKAGES:-python3,python3-pip,python3-venv,python-is-python3,git,ca-certificates,curl,sudo,procps}
ROOTFS_SIZE_MB=${STASIS_ROOTFS_SIZE_MB:-auto}
# What the host trusts beyond Debian's CAs (an operator's TLS-inspecting
# proxy, a private package index), the sandboxes trust too: pip and git in a
# sandbox go out through the same network as the host.
EXTRA_CA=${STASIS_GUEST_EXTRA_CA-/usr/local/share/ca-certificates}
KERNEL_PKG=${STASIS_KERNEL_PKG:-linux-image-amd64}
GUEST_DIR=$REPO/scripts/guest
# Modules the guest needs to boot (their dependencies are added from modules.dep),
# loaded by /init in this order; LATE_MODULES are loaded in the background by PID 1
# after switch_root (off the boot path).
MODULES=(virtio_ring virtio virtio_mmio virtio_blk virtio_console
    crc16 mbcache jbd2 crc32c_generic ext4)
# virtio_net: the NIC of sandboxes with an egress allowlist (the agent waits for it).
LATE_MODULES=(overlay virtio-rng virtio_net)
# Under TCG on these hosts the PIT-based TSC calibration fails and the timer tick
# never starts (microvm's MADT has no IRQ0 override under TCG): the kernel hangs in
# calibrate_delay. Giving it the TSC rate (tsc_early_khz=<host TSC kHz>, which is
# the guest's TSC rate under TCG) lets it skip calibration and use the TSC-deadline
# LAPIC timer; tsc=reliable keeps the clocksource watchdog from dropping to jiffies.
# cryptomgr.notests skips the crypto self-tests (~1.5 s of TCG boot).
KERNEL_CMDLINE="console=ttyS0 reboot=t panic=-1 quiet tsc=reliable cryptomgr.notests"
KERNEL_CMDLINE_TSC="tsc_early_khz={host_tsc_khz}"

START=$SECONDS
log() { printf '[guest-image %4ss] %s\n' "$((SECONDS - START))" "$*" >&2; }
die() {
    printf 'build-guest-image: error: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------- prerequisites
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, mknod, file ownership in the rootfs)"
missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$1 (apt: $2)"); }
need apt-get apt
need apt-cache apt
need dpkg-deb dpkg
need depmod kmod
need debootstrap debootstrap
need qemu-img qemu-utils
need mkfs.ext4 e2fsprogs
need cpio cpio
need xz xz-utils
need zstd zstd
need gzip gzip
need perl perl-base
need sha256sum coreutils
need b3sum b3sum
[ -n "${STASIS_AGENT_BIN:-}" ] || need cargo "rustup/cargo"
is_static() { { ldd "$1" 2>&1 || true; } | grep -qE 'statically linked|not a dynamic executable'; }
[ -x /bin/busybox ] && is_static /bin/busybox ||
    missing+=("static /bin/busybox (apt: busybox-static)")
[ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]} -- run scripts/setup.sh (or apt-get install -y debootstrap busybox-static qemu-utils e2fsprogs cpio xz-utils zstd kmod b3sum)"

mkdir -p "$OUT" "$CACHE"
OUT=$(cd "$OUT" && pwd)
CACHE=$(cd "$CACHE" && pwd)
exec 9>"$CACHE/.lock"
flock -n 9 || {
    log "another build holds $CACHE/.lock; waiting"
    flock 9
}

sha() { sha256sum "$@" | cut -d' ' -f1; }
strsha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
# install_file SRC DST: replace DST atomically if its content differs
install_file() {
    if ! cmp -s "$1" "$2"; then
        cp "$1" "$2.tmp.$$"
        mv -f "$2.tmp.$$" "$2"
        return 0
    fi
    return 1
}

detect_mirror() {
    local m=""
    if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
        m=$(awk -v s="$SUITE" '
            /^[Uu][Rr][Ii][Ss]:/ { u = $2 }
            /^$/ { u = "" }
            /^[Ss]uites:/ { for (i = 2; i <= NF; i++) if ($i == s && u != "") { print u; exit } }
        ' /etc/apt/sources.list.d/*.sources)
    fi
    if [ -z "$m" ]; then
        m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            sed -e 's/\[[^]]*\]//' | awk -v s="$SUITE" '$1 == "deb" && $3 == s { print $2; exit }')
    fi
    echo "${m:-http://deb.debian.org/debian}"
}
MIRROR=${STASIS_DEBIAN_MIRROR:-$(detect_mirror)}

# ---------------------------------------------------------------- kernel
stage_kernel() {
    local t0=$SECONDS
    local real_pkg kver_pkg rkey
    # Resolving the metapackage costs seconds of apt-cache; reuse the answer until
    # the apt lists change.
    rkey="$KERNEL_PKG $(stat -c %Y /var/lib/apt/lists 2>/dev/null || echo 0)"
    mkdir -p "$CACHE/kernel"
    if [ "$(head -1 "$CACHE/kernel/resolved" 2>/dev/null)" = "$rkey" ]; then
        real_pkg=$(sed -n 2p "$CACHE/kernel/resolved")
        kver_pkg=$(sed -n 3p "$CACHE/kernel/resolved")
    else
        real_pkg=$(apt-cache depends "$KERNEL_PKG" 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }')
        [ -n "$real_pkg" ] || real_pkg=$KERNEL_PKG
        kver_pkg=$(apt-cache policy "$real_pkg" | awk '/Candidate:/ { print $2; exit }')
        [ -n "$kver_pkg" ] && [ "$kver_pkg" != "(none)" ] || die "apt knows no candidate for $real_pkg (apt-get update?)"
        printf '%s\n%s\n%s\n' "$rkey" "$real_pkg" "$kver_pkg" >"$CACHE/kernel/resolved"
    fi
    KDIR=$CACHE/kernel/${real_pkg}_${kver_pkg}
    KERNEL_PACKAGE=$real_pkg
    KERNEL_PACKAGE_VERSION=$kver_pkg
    if [ ! -e "$KDIR/.complete" ]; then
        log "kernel: downloading $real_pkg $kver_pkg"
        rm -rf "$KDIR"
        mkdir -p "$KDIR/deb" "$KDIR/root"
        (cd "$KDIR/deb" && apt-get -q -o APT::Sandbox::User=root download "$real_pkg=$kver_pkg" >/dev/null)
        log "kernel: unpacking"
        dpkg-deb -x "$KDIR"/deb/*.deb "$KDIR/root"
        KREL=$(ls "$KDIR/root/lib/modules" | head -1)
        [ -n "$KREL" ] || die "no /lib/modules in $real_pkg"
        depmod -b "$KDIR/root" "$KREL"
        log "kernel: extracting vmlinux from vmlinuz-$KREL"
        extract_vmlinux "$KDIR/root/boot/vmlinuz-$KREL" "$KDIR/vmlinux"
        rm -rf "$KDIR/deb"
        echo "$KREL" >"$KDIR/release"
        touch "$KDIR/.complete"
    fi
    KREL=$(cat "$KDIR/release")
    if install_file "$KDIR/vmlinux" "$OUT/vmlinux"; then
        echo $((SECONDS - t0)) >"$OUT/.time.kernel"
        log "kernel: vmlinux $KREL installed ($(($(stat -c %s "$OUT/vmlinux") / 1024 / 1024)) MiB)"
    else
        log "kernel: vmlinux $KREL up to date"
    fi
}

# Find the compressed payload in a bzImage by its magic and decompress it (what the
# kernel's scripts/extract-vmlinux does); accept the first result that is an ELF.
extract_vmlinux() {
    local img=$1 dst=$2 off
    local -a tries=('fd377a585a00:xz -dcq --single-stream' '28b52ffd:zstd -dcq' '1f8b08:gzip -dcq')
    for t in "${tries[@]}"; do
        local magic=${t%%:*} cmd=${t#*:}
        for off in $(perl -0777 -ne 'BEGIN { $m = pack("H*", shift @ARGV) } while (/\Q$m\E/g) { print pos() - length($m), "\n" }' "$magic" "$img"); do
            tail -c "+$((off + 1))" "$img" | $cmd >"$dst.tmp" 2>/dev/null || true
            if [ "$(head -c 4 "$dst.tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
                mv "$dst.tmp" "$dst"
                return 0
            fi
        done
    done
    rm -f "$dst.tmp"
    die "could not find a compressed ELF kernel in $img"
}

# ---------------------------------------------------------------- agent
stage_agent() {
    if [ -n "${STASIS_AGENT_BIN:-}" ]; then
        AGENT=$STASIS_AGENT_BIN
        [ -x "$AGENT" ] || die "STASIS_AGENT_BIN=$AGENT is not an executable"
    else
        local tdir=${STASIS_AGENT_TARGET_DIR:-${CARGO_TARGET_DIR:-$REPO/target}}
        log "agent: cargo build --release (static, target dir $tdir)"
        # An explicit --target keeps RUSTFLAGS off build scripts and proc macros,
        # and puts this static build beside (not over) the normal host build.
        (cd "$REPO" && CARGO_TARGET_DIR=$tdir RUSTFLAGS="-C target-feature=+crt-static -C strip=symbols" \
            cargo build --release --quiet -p stasis-guest-agent --target x86_64-unknown-linux-gnu)
        AGENT=$tdir/x86_64-unknown-linux-gnu/release/stasis-agent
    fi
    if ! is_static "$AGENT"; then
        die "agent $AGENT is dynamically linked; it must be static (-C target-feature=+crt-static)"
    fi
}

# ---------------------------------------------------------------- initramfs
# Drop a module's appended signature ("~Module signature appended~\n" trailer):
# verifying RSA signatures under TCG cost ~1.8 s of every cold boot. Debian's
# kernel does not enforce signatures (MODULE_SIG_FORCE off, no lockdown), so the
# unsigned modules load; the kernel notes the 'E' taint once.
unsign_module() {
    perl -e '
        my ($in, $out) = @ARGV;
        open(my $f, "<:raw", $in) or die "$in: $!";
        my $d = do { local $/; <$f> };
        close $f;
        my $magic = "~Module signature appended~\n";
        my $ml = length($magic);
        if (length($d) > $ml + 12 && substr($d, -$ml) eq $magic) {
            my $siglen = unpack("N", substr($d, -$ml - 4, 4));
            $d = substr($d, 0, length($d) - $ml - 12 - $siglen);
        }
        open(my $o, ">:raw", $out) or die "$out: $!";
        print $o $d;
        close $o or die "$out: $!";
    ' "$1" "$2"
}

stage_initrd() {
    local t0=$SECONDS
    local moddir=$KDIR/root/lib/modules/$KREL
    # Dependency closure in load order (dependencies first), from modules.dep.
    declare -A seen=()
    local -a order=()
    modpath() {
        # module name -> path relative to the modules dir (names may use - or _)
        local n=$1 alt
        alt=$(echo "$n" | tr '_-' '-_')
        awk -F: -v a="/$n.ko" -v b="/$alt.ko" '
            { p = $1; sub(/\.(xz|zst|gz)$/, "", p) }
            (substr(p, length(p) - length(a) + 1) == a || substr(p, length(p) - length(b) + 1) == b) { print $1; exit }
        ' "$moddir/modules.dep"
    }
    add_mod() {
        local path=$1 deps d
        [ -z "${seen[$path]:-}" ] || return 0
        seen[$path]=1
        deps=$(awk -F': *' -v p="$path" '$1 == p { print $2; exit }' "$moddir/modules.dep")
        # modules.dep lists the full closure, deepest last: load in reverse.
        for d in $(echo "$deps" | tr ' ' '\n' | tac); do
            add_mod "$d"
        done
        order+=("$path")
    }
    local m p n_boot
    for m in "${MODULES[@]}" -- "${LATE_MODULES[@]}"; do
        if [ "$m" = -- ]; then
            n_boot=${#order[@]}
            continue
        fi
        p=$(modpath "$m")
        if [ -z "$p" ]; then
            if grep -qE "/${m//-/[-_]}\.ko" "$moddir/modules.builtin" 2>/dev/null; then
                continue # built in
            fi
            die "kernel module $m not found in $KREL"
        fi
        add_mod "$p"
    done

    local key
    key=$(
        {
            echo "initrd-v2 $KREL $n_boot"
            sha "$AGENT" /bin/busybox "$GUEST_DIR/init" "$GUEST_DIR/pid1"
            printf '%s\n' "${order[@]}"
        } | sha256sum | cut -d' ' -f1
    )
    if [ -e "$OUT/initrd.img" ] && [ "$(cat "$OUT/.initrd.key" 2>/dev/null)" = "$key" ]; then
        log "initrd: up to date (${#order[@]} modules)"
        return 0
    fi
    log "initrd: assembling (busybox, ${#order[@]} modules, agent $(($(stat -c %s "$AGENT") / 1024)) KiB)"
    local root=$CACHE/initrd-root
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,dev,proc,sys,run,tmp,newroot,lib/modules/"$KREL",lib/modules/late}
    cp /bin/busybox "$root/bin/busybox"
    for a in $(/bin/busybox --list); do
        [ "$a" = busybox ] || ln -sf busybox "$root/bin/$a"
    done
    mknod -m 600 "$root/dev/console" c 5 1
    mknod -m 666 "$root/dev/null" c 1 3
    install -m 0755 "$GUEST_DIR/init" "$root/init"
    install -m 0644 "$GUEST_DIR/pid1" "$root/pid1"
    install -m 0755 "$AGENT" "$root/stasis-agent"
    : >"$root/lib/modules/load.list"
    : >"$root/lib/modules/late/list"
    local i=0 q dst
    for p in "${order[@]}"; do
        q=${p%.xz}
        q=${q%.zst}
        if [ $i -lt "$n_boot" ]; then
            dst=$root/lib/modules/$KREL/$q
            echo "$q" >>"$root/lib/modules/load.list"
        else
            dst=$root/lib/modules/late/$(basename "$q")
            basename "$q" >>"$root/lib/modules/late/list"
        fi
        i=$((i + 1))
        mkdir -p "$(dirname "$dst")"
        case "$p" in
        *.xz) xz -dc "$moddir/$p" >"$dst.signed" ;;
        *.zst) zstd -dcq "$moddir/$p" >"$dst.signed" ;;
        *) cp "$moddir/$p" "$dst.signed" ;;
        esac
        unsign_module "$dst.signed" "$dst"
        rm -f "$dst.signed"
    done
    (cd "$root" && find . -print0 | LC_ALL=C sort -z |
        cpio --null -o -H newc --reproducible -R 0:0 --quiet) | gzip -9 -n >"$OUT/initrd.img.tmp"
    mv -f "$OUT/initrd.img.tmp" "$OUT/initrd.img"
    echo "$key" >"$OUT/.initrd.key"
    printf '%s\n' "${order[@]}" >"$OUT/.initrd.modules"
    echo $((SECONDS - t0)) >"$OUT/.time.initrd"
    log "initrd: initrd.img $(($(stat -c %s "$OUT/initrd.img") / 1024)) KiB"
}

# ---------------------------------------------------------------- rootfs
stage_rootfs() {
    local key tree
    # v2: /etc/pip.conf (below) is part of the tree, and the extra CAs.
    # v3: the unprivileged account `user` (below).
    local ca=()
    [ -z "$EXTRA_CA" ] || [ ! -d "$EXTRA_CA" ] || mapfile -t ca < <(find "$EXTRA_CA" -maxdepth 1 -type f -name '*.crt' | LC_ALL=C sort)
    local ca_sum=none
    [ ${#ca[@]} -eq 0 ] || ca_sum=$(cat "${ca[@]}" | sha256sum | cut -c1-16)
    key=$(strsha "rootfs-v3 $SUITE $VARIANT $PACKAGES $MIRROR ca=$ca_sum" | cut -c1-16)
    tree=$CACHE/rootfs-$SUITE-$key
    if [ ! -e "$tree/.complete" ]; then
        local t0=$SECONDS
        log "rootfs: debootstrap --variant=$VARIANT --include=$PACKAGES $SUITE from $MIRROR (a few minutes)"
        # A failed debootstrap can leave proc/sys mounted inside its target.
        awk -v t="$tree.tmp/" 'index($2, t) == 1 { print $2 }' /proc/mounts | sort -r |
            while read -r mnt; do umount -l "$mnt" || true; done
        rm -rf "$tree.tmp"
        mkdir -p "$tree.tmp"
        local dlog=$CACHE/debootstrap-$key.log
        debootstrap --variant="$VARIANT" --include="$PACKAGES" "$SUITE" "$tree.tmp" "$MIRROR" >"$dlog" 2>&1 &
        local pid=$! last=""
        while kill -0 "$pid" 2>/dev/null; do
            sleep 5
            local cur
            cur=$(grep -E '^I: (Retrieving|Validating|Extracting|Installing|Unpacking|Configuring)' "$dlog" | tail -1 | cut -c1-70 || true)
            if [ -n "$cur" ] && [ "$cur" != "$last" ]; then
                log "rootfs: $cur"
                last=$cur
            fi
        done
        wait "$pid" || {
            tail -20 "$dlog" >&2
            die "debootstrap failed (log: $dlog)"
        }
        log "rootfs: configuring"
        local r=$tree.tmp
        echo stasis >"$r/etc/hostname"
        printf '127.0.0.1\tlocalhost\n127.0.1.1\tstasis\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$r/etc/hosts"
        printf '# root is mounted by the stasis initramfs\n/dev/vda\t/\text4\trw,noatime\t0\t1\n' >"$r/etc/fstab"
        : >"$r/etc/machine-id"
        mkdir -p "$r/run/stasis" "$r/workspace"
        # PEP 668: Debian marks its Python "externally managed", so a bare
        # `pip install X` is refused. A sandbox is one tenant's throwaway
        # machine, not a shared host: let pip install into the system Python
        # as a Dockerfile's `RUN pip install X` expects (a venv stays the clean
        # choice: `python3 -m venv /v`). Documented in docs/src/images.md.
        printf '[global]\nbreak-system-packages = true\nroot-user-action = ignore\n' >"$r/etc/pip.conf"
        # An unprivileged account with passwordless sudo, uid/gid 1000, home
        # /home/user: E2B's default user (the E2B edge runs `base` sandboxes
        # as it), and a non-root USER for anyone's Dockerfile.
        chroot "$r" /usr/sbin/useradd --uid 1000 --user-group --create-home --shell /bin/bash user
        printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >"$r/etc/sudoers.d/user"
        chmod 0440 "$r/etc/sudoers.d/user"
        [ -e "$r/usr/bin/pip" ] || ln -s pip3 "$r/usr/bin/pip"
        if [ ${#ca[@]} -gt 0 ]; then
            log "rootfs: trusting ${#ca[@]} extra CA certificate(s) from $EXTRA_CA"
            mkdir -p "$r/usr/local/share/ca-certificates"
            cp "${ca[@]}" "$r/usr/local/share/ca-certificates/"
            chroot "$r" /usr/sbin/update-ca-certificates >/dev/null
        fi
        # Shrink: package caches, apt lists, man pages, message translations
        # (git's alone are 40 MiB; programs fall back to English).
        rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* \
            "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/var/log/*.log "$r"/debootstrap 2>/dev/null || true
        find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + 2>/dev/null || true
        chroot "$r" /usr/bin/python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' >"$r/.python-version" 2>/dev/null || echo unknown >"$r/.python-version"
        mv "$r/.python-version" "$CACHE/python-version-$key"
        rm -rf "$tree"
        mv "$tree.tmp" "$tree"
        touch "$tree/.complete"
        echo $((SECONDS - t0)) >"$CACHE/debootstrap-$key.seconds"
        log "rootfs: debootstrap done in $((SECONDS - t0))s ($(du -sm "$tree" | cut -f1) MiB)"
    fi
    PYTHON_VERSION=$(cat "$CACHE/python-version-$key" 2>/dev/null || echo unknown)
    ROOTFS_KEY=$key
    # The same tree as a directory: the daemon registers it as the public
    # image `stasis-base:bookworm` (FROM of a Dockerfile, or a process
    # sandbox's root).
    ln -sfn "$tree" "$OUT/base-rootfs"

    local ikey
    ikey=$(strsha "image-v2 $key $ROOTFS_SIZE_MB")
    if [ -e "$OUT/rootfs.qcow2" ] && [ "$(cat "$OUT/.rootfs.key" 2>/dev/null)" = "$ikey" ]; then
        log "rootfs: rootfs.qcow2 up to date"
        return 0
    fi
    local t0=$SECONDS
    local used size
    used=$(du -sm "$tree" | cut -f1)
    # Small by default: a sandbox's writable space is its manifest's disk_mb,
    # added to this by the sandbox's disk size (the agent grows the filesystem).
    if [ "$ROOTFS_SIZE_MB" = auto ]; then
        size=$((used + used / 4 + 64))
    else
        size=$ROOTFS_SIZE_MB
        [ "$size" -ge $((used + 64)) ] || size=$((used + 64))
    fi
    log "rootfs: mkfs.ext4 -d ($used MiB of files, ${size} MiB disk)"
    local raw=$CACHE/rootfs-$key.raw
    rm -f "$raw"
    truncate -s "${size}M" "$raw"
    mkfs.ext4 -q -F -L stasis-root -m 0 -b 4096 -J size=32 \
        -E lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0 -d "$tree" "$raw"
    log "rootfs: qemu-img convert -O qcow2"
    qemu-img convert -q -f raw -O qcow2 "$raw" "$OUT/rootfs.qcow2.tmp"
    rm -f "$raw"
    mv -f "$OUT/rootfs.qcow2.tmp" "$OUT/rootfs.qcow2"
    echo "$ikey" >"$OUT/.rootfs.key"
    echo $((SECONDS - t0)) >"$OUT/.time.rootfs-image"
    cp "$CACHE/debootstrap-$key.seconds" "$OUT/.time.debootstrap" 2>/dev/null || true
    log "rootfs: rootfs.qcow2 $(($(stat -c %s "$OUT/rootfs.qcow2") / 1024 / 1024)) MiB"
}

# ---------------------------------------------------------------- image.json
# file_json NAME: {"size":..,"sha256":..,"blake3":..}, hashes cached by size+mtime
file_json() {
    local f=$OUT/$1 c=$OUT/.hash.$1 stamp s b
    stamp=$(stat -c '%s %Y' "$f")
    if [ "$(head -1 "$c" 2>/dev/null)" != "$stamp" ]; then
        s=$(sha256sum "$f" | cut -d' ' -f1)
        b=$(b3sum --no-names "$f")
        printf '%s\n%s\n%s\n' "$stamp" "$s" "$b" >"$c"
    fi
    s=$(sed -n 2p "$c")
    b=$(sed -n 3p "$c")
    printf '{"size": %s, "sha256": "%s", "blake3": "%s"}' "$(stat -c %s "$f")" "$s" "$b"
}

write_image_json() {
    local agent_version files="" n newest=0 m
    agent_version=$(awk -F'"' '/^version *=/ { print $2; exit }' "$REPO/Cargo.toml")
    for n in vmlinux initrd.img rootfs.qcow2; do
        [ -e "$OUT/$n" ] || continue
        [ -z "$files" ] || files+=", "
        files+="\"$n\": $(file_json "$n")"
        m=$(stat -c %Y "$OUT/$n")
        [ "$m" -le "$newest" ] || newest=$m
    done
    local rootfs_virtual=null
    [ -e "$OUT/rootfs.qcow2" ] && rootfs_virtual=$(qemu-img info --output=json "$OUT/rootfs.qcow2" | awk -F': *' '/"virtual-size"/ { gsub(/,/, "", $2); print $2; exit }')
    local t py=null
    t() { cat "$OUT/.time.$1" 2>/dev/null || echo null; }
    [ -z "${PYTHON_VERSION:-}" ] || py="\"$PYTHON_VERSION\""
    # Deterministic for unchanged inputs (built_at is the newest file's mtime), so a
    # no-op rebuild leaves image.json byte-identical (consumers may hash it).
    cat >"$OUT/image.json.tmp" <<JSON
{
  "format": 1,
  "built_at": "$(date -u -d "@$newest" +%Y-%m-%dT%H:%M:%SZ)",
  "arch": "x86_64",
  "kernel": {"package": "$KERNEL_PACKAGE", "version": "$KERNEL_PACKAGE_VERSION", "release": "$KREL"},
  "kernel_cmdline": "$KERNEL_CMDLINE",
  "kernel_cmdline_tcg": "$KERNEL_CMDLINE_TSC",
  "modules": [$(sed 's/.*/"&"/' "$OUT/.initrd.modules" | paste -sd, -)],
  "busybox": "$(/bin/busybox 2>&1 | head -1 | awk '{ print $2 }')",
  "agent": {"version": "$agent_version", "protocol_port": "org.stasis.agent.0"},
  "rootfs": {"suite": "$SUITE", "variant": "$VARIANT", "packages": "$PACKAGES", "mirror": "$MIRROR",
             "python": $py, "fstype": "ext4", "virtual_size": $rootfs_virtual},
  "build_seconds": {"kernel": $(t kernel), "initrd": $(t initrd), "debootstrap": $(t debootstrap), "rootfs_image": $(t rootfs-image)},
  "files": {$files}
}
JSON
    if cmp -s "$OUT/image.json.tmp" "$OUT/image.json"; then
        rm -f "$OUT/image.json.tmp"
    else
        mv -f "$OUT/image.json.tmp" "$OUT/image.json"
        log "image.json written"
    fi
}

log "output $OUT, cache $CACHE, mirror $MIRROR"
stage_kernel
stage_agent
stage_initrd
if [ "${STASIS_SKIP_ROOTFS:-0}" != 1 ]; then
    stage_rootfs
fi
write_image_json
log "done in $((SECONDS - START))s: $(cd "$OUT" && du -sh --apparent-size vmlinux initrd.img $( [ -e rootfs.qcow2 ] && echo rootfs.qcow2) | awk '{ printf "%s %s  ", $2, $1 }')"
