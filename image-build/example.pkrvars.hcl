# Example values. CI validates the template with this file, offline; copy it and fill in
# real ones for a build. Long unique dummy strings: packer masks every occurrence of a
# sensitive value in its output, and short ones garble messages. Relative paths are taken
# from the directory packer runs in: the repository root in README's commands.
deb              = "target/debian/nodeagent.deb"
ssh_password     = "example-build-password-change-me"
vcenter_server   = "vcenter.example.invalid"
vcenter_username = "packer@vsphere.local"
vcenter_password = "example-vcenter-password-change-me"
datacenter       = "dc1"
cluster          = "cluster1"
datastore        = "datastore1"
folder           = "capi-images"
network          = "VM Network"
template         = "ubuntu-2404-kube-v1.33.1"

# Where the installer ISO and the Debian packages come from: your mirror
# (or Debian's own). Checksums as sha256:HEX / sha512:HEX keep `packer validate` offline;
# `file:URL` of a SUMS file also works for a build (packer then fetches it when validating).
iso_url                 = "https://mirror.example.invalid/debian-cd/12.8.0/amd64/iso-cd/debian-12.8.0-amd64-netinst.iso"
iso_checksum            = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
debian_mirror_host      = "mirror.example.invalid"
debian_mirror_directory = "/debian"
# qemu.node needs none of these: image-build/build-qemu passes its local base image and the
# checksum it computed (the value here only keeps `packer validate` offline).
base_image_checksum = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
