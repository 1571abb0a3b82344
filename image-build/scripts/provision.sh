#!/bin/sh
# Bake nodeagent into a node image. The one provisioning script every image
# uses: the Packer builds (vsphere-iso, vsphere-clone, qemu) run it inside the VM, the
# QEMU test images and packaging/ci-check run it in a chroot of a debootstrap'd root.
# So it never needs a running systemd, the network, or anything outside the image.
#
#   provision.sh [--root DIR] [--no-cleanup] [--require-vmtools] [--no-verify] PATH/TO/nodeagent_*.deb
#
# Order matters: install, enable, image cleanup, and only then disable cloud-init,
# because a cleanup (image-builder's sysprep role too) deletes
# /etc/cloud/cloud-init.disabled. Run it as the LAST provisioning step of a build.
#   --no-cleanup       skip the cleanup (hygiene) step, e.g. for a root that never booted.
#   --require-vmtools  fail unless open-vm-tools is installed (vSphere images: CAPV learns
#                      the node's IP addresses from VMware Tools).
#   --no-verify        skip verify.sh (it runs by default, as the last step).
#   --root DIR         provision the Debian root filesystem at DIR from outside: copies the
#                      package and these scripts into it and runs them there with chroot.
set -eu

root=""
pass_on=""
cleanup=yes
require_vmtools=no
verify=yes
while [ $# -gt 0 ]; do
    case $1 in
        --root) [ $# -ge 2 ] || { echo "provision.sh: --root needs a directory" >&2; exit 2; }
                root=$2; shift ;;
        --no-cleanup) cleanup=no; pass_on="$pass_on $1" ;;
        --require-vmtools) require_vmtools=yes; pass_on="$pass_on $1" ;;
        --no-verify) verify=no; pass_on="$pass_on $1" ;;
        --) shift; break ;;
        -*) echo "provision.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
[ $# -eq 1 ] || { echo "usage: provision.sh [--root DIR] [--no-cleanup] [--require-vmtools] [--no-verify] DEB" >&2; exit 2; }
deb=$1
here=$(cd "$(dirname "$0")" && pwd)

say() { echo "provision: $*"; }
die() { echo "provision: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"
[ -f "$deb" ] || die "$deb: no such package file"

# From outside a root: run this same script inside it, so what is tested is what ships.
if [ -n "$root" ]; then
    [ -x "$root/usr/bin/dpkg" ] || die "$root: not a Debian root filesystem (no usr/bin/dpkg)"
    work=/tmp/nodeagent-provision.$$
    mkdir -p "$root$work"
    cp "$deb" "$root$work/nodeagent.deb"
    cp "$here/provision.sh" "$here/verify.sh" "$root$work/"
    rc=0
    # SYSTEMD_OFFLINE: systemctl edits symlinks and never asks a (host's) running systemd.
    # shellcheck disable=SC2086
    chroot "$root" /usr/bin/env SYSTEMD_OFFLINE=1 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/sh "$work/provision.sh" $pass_on "$work/nodeagent.deb" || rc=$?
    rm -rf "${root:?}$work"
    exit $rc
fi
command -v systemctl >/dev/null || die "systemctl not found: nodeagent needs systemd in the image"
# A unit installed by a package (file check: works offline, unlike `systemctl cat`).
has_unit() { [ -f "/lib/systemd/system/$1" ] || [ -f "/usr/lib/systemd/system/$1" ]; }
# Not booted with systemd (a chroot, a container): systemctl must only edit symlinks.
if [ ! -d /run/systemd/system ]; then export SYSTEMD_OFFLINE=1; fi

# The cloud-init units of every release we know (cloud-init-main from 24.3, and
# cloud-init-network replacing cloud-init.service there).
CLOUD_INIT_UNITS="cloud-init-local.service cloud-init.service cloud-init-network.service cloud-config.service cloud-final.service cloud-init-main.service"

# 1. Install. dpkg, not apt: works offline in a chroot; the package depends only on libc.
#    --force-confold keeps an /etc/nodeagent/config.yaml the image already customised.
say "installing $deb"
DEBIAN_FRONTEND=noninteractive dpkg -i --force-confold "$deb"

# 2. Enable our units. The package's postinst already did this (deb-systemd-helper);
#    doing it again here makes a re-run on an image where someone disabled them explicit.
#    `systemctl enable` only edits symlinks: fine in a chroot and without a running systemd.
say "enabling nodeagent-local.service nodeagent.service nodeagent-ssh-keygen.service"
systemctl enable nodeagent-local.service nodeagent.service nodeagent-ssh-keygen.service
rm -f /etc/nodeagent/disabled

# 3. VMware Tools stays enabled: CAPV marks a machine provisioned only when the VM's
#    guest.net (reported by vmtoolsd) shows its IPs; vmtoolsd also does power operations.
if has_unit open-vm-tools.service; then
    say "keeping open-vm-tools.service (vmtoolsd) enabled"
    systemctl unmask open-vm-tools.service >/dev/null 2>&1 || true
    systemctl enable open-vm-tools.service
elif [ $require_vmtools = yes ]; then
    die "open-vm-tools is not installed (required for vSphere images)"
else
    say "open-vm-tools not installed: fine for non-vSphere images"
fi

# 4. Remove image-builder's cloud-init-only pieces: they would order things after
#    units that no longer run.
for f in /etc/systemd/system/modify-cloud-init-cfg.service \
         /etc/systemd/system/cloud-init.target.wants/modify-cloud-init-cfg.service \
         /etc/systemd/system/cloud-final.service.d/boot-order.conf \
         /etc/systemd/system/cloud-config.service.d/boot-order.conf; do
    if [ -e "$f" ] || [ -L "$f" ]; then say "removing $f"; rm -f "$f"; fi
done

# 5. Image cleanup: leave nothing that makes two nodes from this image look alike, and no
#    state of ours, so the first boot of every clone is a first boot.
if [ $cleanup = yes ]; then
    say "cleaning the image (agent state, cloud-init state, machine-id, SSH host keys)"
    rm -rf /var/lib/nodeagent /run/nodeagent /var/log/nodeagent
    if command -v cloud-init >/dev/null 2>&1; then
        cloud-init clean --logs >/dev/null 2>&1 || true
    fi
    rm -rf /var/lib/cloud
    # Empty (not missing) machine-id: systemd makes a new one and treats the boot as first.
    if [ -e /etc/machine-id ]; then : >/etc/machine-id; fi
    if [ -f /var/lib/dbus/machine-id ] && [ ! -L /var/lib/dbus/machine-id ]; then rm -f /var/lib/dbus/machine-id; fi
    rm -f /etc/ssh/ssh_host_*
    # The installer may leave ds=nocloud in GRUB; it would point a later cloud-init at the
    # wrong datasource (canonical/cloud-init issue 4977) and means nothing to us.
    if [ -f /etc/default/grub ] && grep -q 'ds=nocloud' /etc/default/grub; then
        say "removing ds=nocloud from /etc/default/grub"
        sed -i 's/ *ds=nocloud[^" ]*//g' /etc/default/grub
        if command -v update-grub >/dev/null 2>&1 && [ -d /boot/grub ]; then update-grub; fi
    fi
fi

# 6. Disable cloud-init, last: after every cleanup above and any before this script.
#    Two independent levers: the marker its systemd generator checks, and masked units,
#    so neither a deleted marker nor a later package upgrade brings it back.
say "disabling cloud-init"
mkdir -p /etc/cloud
: >/etc/cloud/cloud-init.disabled
# shellcheck disable=SC2086
systemctl mask $CLOUD_INIT_UNITS >/dev/null

# 7. Verify (goss-style checks, same script the CI runs).
if [ $verify = yes ]; then
    vflags=""
    [ $require_vmtools = yes ] && vflags="--require-vmtools"
    # shellcheck disable=SC2086
    sh "$here/verify.sh" $vflags "$deb"
fi
say "done"
