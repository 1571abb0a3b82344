#!/bin/sh
# Pack a vSphere export (OVF + VMDK + SHA256 manifest, as Packer's vsphere `export {}`
# writes it) into an OVA. packer 1.6.6 cannot write .ova itself. Same layout
# as image-builder's hack/image-build-ova.py default path: a plain tar with the OVF first,
# then the manifest, then the disks, plus <ova>.sha256.
#
#   make-ova.sh EXPORT_DIR OUTPUT.ova
set -eu
[ $# -eq 2 ] || { echo "usage: make-ova.sh EXPORT_DIR OUTPUT.ova" >&2; exit 2; }
dir=$1
ova=$2
cd "$dir"
set -- *.ovf
if [ $# -ne 1 ] || [ ! -f "$1" ]; then echo "make-ova.sh: want exactly one .ovf in $dir" >&2; exit 1; fi
ovf=$1
base=${ovf%.ovf}
mf=$base.mf
# Regenerate the manifest, so it covers exactly what goes into the OVA.
: >"$mf.tmp"
for f in "$ovf" "$base"*.vmdk; do
    [ -f "$f" ] || { echo "make-ova.sh: no disk for $ovf in $dir" >&2; exit 1; }
    echo "SHA256($f)= $(sha256sum "$f" | cut -d' ' -f1)" >>"$mf.tmp"
done
mv "$mf.tmp" "$mf"
cd - >/dev/null
case $ova in /*) out=$ova ;; *) out=$PWD/$ova ;; esac
# shellcheck disable=SC2046
(cd "$dir" && tar --format=ustar --owner=0 --group=0 -cf "$out" "$ovf" "$mf" $(ls "$base"*.vmdk))
(cd "$(dirname "$out")" && sha256sum "$(basename "$out")" >"$(basename "$out").sha256")
echo "make-ova.sh: wrote $out"
