#!/bin/sh
# Load container images into containerd's k8s.io namespace, image-builder's air-gapped path
# (its kubernetes role's `ctr -n k8s.io images import` of image tarballs): the images a node's
# `kubeadm init`/`join` and its pods need are in the image, so nothing is pulled at boot.
#
#   import-images.sh DIR     every DIR/*.tar (docker-save or OCI archives), unpacked for the
#                            CRI's snapshotter; DIR/images.txt ("REF CONFIG-DIGEST" per line)
#                            lists what must be there afterwards
#
# A DIR without archives (the plain image) imports nothing. Runs inside the build VM as root,
# with containerd installed; every wait is bounded.
set -eu
dir=${1:?usage: import-images.sh DIR}
say() { echo "import-images: $*"; }
die() { echo "import-images: error: $*" >&2; exit 1; }
set -- "$dir"/*.tar
if [ ! -e "$1" ]; then say "no image archives in $dir: nothing to import"; exit 0; fi
command -v ctr >/dev/null || die "ctr not found: the image has no containerd"
systemctl start containerd.service
i=0
until ctr version >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -le 120 ] || die "containerd did not answer within 60 s"
    sleep 0.5
done
for archive in "$@"; do
    say "importing $(basename "$archive")"
    ctr -n k8s.io images import --platform linux/amd64 "$archive" >/dev/null
done
have=$(ctr -n k8s.io images ls -q)
while read -r ref _config; do
    [ -n "$ref" ] || continue
    printf '%s\n' "$have" | grep -qxF "$ref" || die "$ref is not in containerd's k8s.io namespace after the import"
    say "present: $ref"
done <"$dir/images.txt"
