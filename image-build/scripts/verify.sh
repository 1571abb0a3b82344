#!/bin/sh
# goss-style checks of a provisioned node image. Runs inside the image (VM
# or chroot) as the last step of provision.sh, and again from packaging/ci-check.
# Read-only: checks, prints one line per check, exits 1 if any failed.
#
#   verify.sh [--require-vmtools] [DEB]
# With DEB, the installed package version must be that file's version.
set -u

require_vmtools=no
[ "${1:-}" = --require-vmtools ] && { require_vmtools=yes; shift; }
deb=${1:-}

failed=0
# Not booted with systemd (a chroot): systemctl must read unit files, not ask a manager.
if [ ! -d /run/systemd/system ]; then export SYSTEMD_OFFLINE=1; fi
has_unit() { [ -f "/lib/systemd/system/$1" ] || [ -f "/usr/lib/systemd/system/$1" ]; }
pass() { echo "verify: ok   $*"; }
bad() { echo "verify: FAIL $*"; failed=1; }
check() { # DESCRIPTION COMMAND...
    d=$1; shift
    if "$@" >/dev/null 2>&1; then pass "$d"; else bad "$d"; fi
}
# `systemctl is-enabled` reads unit files only: works in a chroot without systemd running.
enabled_state() { systemctl is-enabled "$1" 2>/dev/null; }
expect_state() { # UNIT STATE...
    u=$1; shift
    s=$(enabled_state "$u")
    for want in "$@"; do [ "$s" = "$want" ] && { pass "$u is $s"; return; }; done
    bad "$u is '${s:-unknown}', want $*"
}

# Package and binary.
# shellcheck disable=SC2016 # expanded by dpkg-query and the inner sh, not here
check "package nodeagent is installed" sh -c 'dpkg-query -W -f="\${Status}" nodeagent | grep -q "install ok installed"'
if [ -n "$deb" ]; then
    want=$(dpkg-deb -f "$deb" Version 2>/dev/null)
    have=$(dpkg-query -W -f='${Version}' nodeagent 2>/dev/null)
    if [ -n "$want" ] && [ "$want" = "$have" ]; then pass "installed version $have is $deb's"; else bad "installed version '$have', package file has '$want'"; fi
fi
check "/usr/bin/nodeagent is an executable file" test -x /usr/bin/nodeagent
ver=$(/usr/bin/nodeagent --version 2>/dev/null)
case $ver in
    "nodeagent "*) pass "nodeagent --version runs: $ver" ;;
    *) bad "nodeagent --version did not run" ;;
esac
# The units' ExecStart must parse: `run --help` lists the --stage option they pass.
check "nodeagent run --help lists --stage (the units' ExecStart)" sh -c '/usr/bin/nodeagent run --help | grep -q -- --stage'

# Units and configuration.
for u in nodeagent-local.service nodeagent.service nodeagent-ssh-keygen.service; do
    check "/lib/systemd/system/$u installed" test -f "/lib/systemd/system/$u"
    expect_state "$u" enabled
done
check "/etc/nodeagent/config.yaml present" test -f /etc/nodeagent/config.yaml
check "/etc/nodeagent/disabled absent (the agent would not run)" test ! -e /etc/nodeagent/disabled

# VMware Tools: enabled when installed; required on vSphere images.
if has_unit open-vm-tools.service; then
    expect_state open-vm-tools.service enabled
elif [ $require_vmtools = yes ]; then
    bad "open-vm-tools not installed (vSphere images need vmtoolsd)"
else
    pass "open-vm-tools not installed (not required for this image)"
fi

# Disk growth at boot (growpart + resizefs, README "Migrating from cloud-init"): the
# image's own tools, as cloud-init used them.
check "growpart installed (cloud-guest-utils)" sh -c 'command -v growpart || test -x /usr/bin/growpart'
check "resize2fs installed (e2fsprogs)" sh -c 'command -v resize2fs || test -x /usr/sbin/resize2fs || test -x /sbin/resize2fs'

# cloud-init disabled, both ways.
check "/etc/cloud/cloud-init.disabled exists" test -f /etc/cloud/cloud-init.disabled
for u in cloud-init-local.service cloud-init.service cloud-config.service cloud-final.service; do
    expect_state "$u" masked
done

# Hygiene: nothing of a previous boot or of ours baked into the image.
# shellcheck disable=SC2016
check "no nodeagent state in /var/lib/nodeagent" sh -c '[ ! -d /var/lib/nodeagent ] || [ -z "$(ls -A /var/lib/nodeagent)" ]'
check "no cloud-init instance state" test ! -e /var/lib/cloud/data/instance-id
check "no image-builder modify-cloud-init-cfg.service" test ! -e /etc/systemd/system/modify-cloud-init-cfg.service

if [ $failed -ne 0 ]; then
    echo "verify: image checks FAILED"
    exit 1
fi
echo "verify: all image checks passed"
