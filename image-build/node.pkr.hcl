# Node image with nodeagent instead of cloud-init doing the first boot.
# Three sources share one provisioning script (scripts/provision.sh), which is also what
# the QEMU test images and CI run in a chroot:
#   vsphere-clone.node  clone an existing node template (e.g. image-builder's CAPV OVA)
#   vsphere-iso.node    install Debian 12 from the netinst ISO on vCenter (seed/debian)
#   qemu.node           local qcow2, offline, from image-build/base-image (Debian packages)
# vSphere builds export OVF+VMDK (packer 1.6.6 cannot write .ova) and
# scripts/make-ova.sh packs them into an OVA the way image-builder's default path does;
# for qemu.node, scripts/qemu-ova.sh writes the OVF and a streamOptimized VMDK first.
#
#   packer build -var-file=my.pkrvars.hcl -only=vsphere-clone.node image-build/
#   image-build/build-qemu plain|kube      (qemu.node, with every variable it needs)

locals {
  build_dir = "/tmp/nodeagent-build"
  # Runs provisioning commands as root through the build user's sudo.
  sudo_exec = "echo '${var.ssh_password}' | {{ .Vars }} sudo -S -E sh -eu '{{ .Path }}'"
  # Removes the build user last, as image-builder's shutdown_command does.
  shutdown = "echo '${var.ssh_password}' | sudo -S sh -c 'userdel -f -r ${var.ssh_username} 2>/dev/null; rm -f /etc/sudoers.d/${var.ssh_username} /etc/sudoers.d/90-cloud-init-users; shutdown -P now'"
  vm_name  = "${var.image_name}-${formatdate("YYYYMMDDhhmm", timestamp())}"
}

source "vsphere-clone" "node" {
  vcenter_server      = var.vcenter_server
  username            = var.vcenter_username
  password            = var.vcenter_password
  insecure_connection = var.vcenter_insecure
  datacenter          = var.datacenter
  cluster             = var.cluster
  datastore           = var.datastore
  folder              = var.folder
  resource_pool       = var.resource_pool

  template            = var.template
  vm_name             = local.vm_name
  linked_clone        = var.linked_clone
  network             = var.network
  CPUs                = var.cpus
  RAM                 = var.memory_mb
  convert_to_template = var.convert_to_template

  communicator     = "ssh"
  ssh_username     = var.ssh_username
  ssh_password     = var.ssh_password
  ssh_timeout      = "30m"
  shutdown_command = local.shutdown
  shutdown_timeout = "10m"

  export {
    force            = true
    manifest         = "sha256"
    output_directory = "${var.output_directory}/vsphere-clone"
  }
}

source "vsphere-iso" "node" {
  vcenter_server      = var.vcenter_server
  username            = var.vcenter_username
  password            = var.vcenter_password
  insecure_connection = var.vcenter_insecure
  datacenter          = var.datacenter
  cluster             = var.cluster
  datastore           = var.datastore
  folder              = var.folder
  resource_pool       = var.resource_pool

  vm_name              = local.vm_name
  guest_os_type        = var.guest_os_type
  CPUs                 = var.cpus
  RAM                  = var.memory_mb
  firmware             = "bios"
  disk_controller_type = ["pvscsi"]
  storage {
    disk_size             = var.disk_size_mb
    disk_thin_provisioned = true
  }
  network_adapters {
    network      = var.network
    network_card = "vmxnet3"
  }
  # CAPV sets guestinfo keys through extraConfig; nothing else is needed in the VMX.
  configuration_parameters = {
    "tools.syncTimeWithHost" = "FALSE"
  }

  iso_url      = var.iso_url
  iso_checksum = var.iso_checksum
  # The installer fetches the preseed from Packer's HTTP server on the build host.
  http_directory = "${path.root}/seed/debian"
  boot_wait      = "10s"
  boot_command = [
    "<esc><wait>",
    "auto url=http://{{ .HTTPIP }}:{{ .HTTPPort }}/preseed.cfg ",
    # Installer boot line only (packer 1.6.6 has no templatefile() to render the preseed);
    # the build user is deleted at shutdown.
    "passwd/username=${var.ssh_username} passwd/user-fullname=${var.ssh_username} ",
    "passwd/user-password=${var.ssh_password} passwd/user-password-again=${var.ssh_password} ",
    "debian-installer/locale=en_US.UTF-8 keyboard-configuration/xkb-keymap=us ",
    "netcfg/get_hostname=localhost netcfg/get_domain=localdomain ",
    "mirror/http/hostname=${var.debian_mirror_host} mirror/http/directory=${var.debian_mirror_directory} ",
    "<enter>",
  ]
  remove_cdrom         = true
  tools_upgrade_policy = false
  convert_to_template  = var.convert_to_template

  communicator     = "ssh"
  ssh_username     = var.ssh_username
  ssh_password     = var.ssh_password
  ssh_timeout      = "60m"
  shutdown_command = local.shutdown
  shutdown_timeout = "10m"

  export {
    force            = true
    manifest         = "sha256"
    output_directory = "${var.output_directory}/vsphere-iso"
  }
}

# Offline, under TCG: the base image is image-build/base-image's (Debian packages only, no
# download), booted with Debian's cloud kernel through -kernel/-initrd (no bootloader in it).
# Packer's SSH reaches the guest only through an explicit hostfwd on 127.0.0.1 of a
# `restrict=on` user network; no VNC or other listener. image-build/build-qemu runs it.
source "qemu" "node" {
  vm_name          = "${var.image_name}.qcow2"
  iso_url          = var.base_image
  iso_checksum     = var.base_image_checksum
  disk_image       = true
  skip_resize_disk = true
  format           = "qcow2"
  disk_interface   = "virtio"
  disk_discard     = "unmap"
  disk_compression = var.qemu_disk_compression
  net_device       = "virtio-net"
  accelerator      = var.qemu_accelerator
  qemu_binary      = var.qemu_binary
  cpus             = var.qemu_cpus
  memory           = var.qemu_memory_mb
  headless         = true
  vnc_bind_address = "127.0.0.1"
  disable_vnc      = true
  output_directory = "${var.output_directory}/qemu"
  qemuargs = [
    ["-kernel", var.base_kernel],
    ["-initrd", var.base_initrd],
    # no_timer_check: TCG on a loaded host is too slow for the kernel's IO-APIC timer check.
    ["-append", "console=ttyS0 root=/dev/vda1 rw quiet panic=-1 no_timer_check"],
    # Replaces packer's default `hostfwd=tcp::PORT-:22`, which listens on every address.
    ["-netdev", "user,id=user.0,restrict=on,hostfwd=tcp:127.0.0.1:{{ .SSHHostPort }}-:22"],
    ["-vnc", "none"],
    ["-display", "none"],
    ["-device", "virtio-rng-pci"],
    # TCG's default CPU (qemu64) has no AES-NI, PCLMULQDQ or SHA: `ctr images import` (sha256
    # over every layer, gzip) and every TLS handshake then run Go's byte-wise fallbacks.
    ["-cpu", "max"],
    ["-serial", "file:${var.output_directory}/console.log"],
  ]

  communicator     = "ssh"
  ssh_host         = "127.0.0.1"
  ssh_username     = var.ssh_username
  ssh_password     = var.ssh_password
  ssh_timeout      = "15m"
  shutdown_command = local.shutdown
  shutdown_timeout = "5m"
}

build {
  sources = ["source.vsphere-clone.node", "source.vsphere-iso.node", "source.qemu.node"]

  provisioner "shell" {
    inline = ["mkdir -p ${local.build_dir}/images"]
  }

  # The same two scripts CI runs in a chroot, and the package built by packaging/build-deb.
  provisioner "file" {
    source      = "${path.root}/scripts/provision.sh"
    destination = "${local.build_dir}/provision.sh"
  }

  provisioner "file" {
    source      = "${path.root}/scripts/verify.sh"
    destination = "${local.build_dir}/verify.sh"
  }

  provisioner "file" {
    source      = var.deb
    destination = "${local.build_dir}/nodeagent.deb"
  }

  provisioner "file" {
    source      = "${path.root}/scripts/import-images.sh"
    destination = "${local.build_dir}/import-images.sh"
  }

  # The container images of an air-gapped node (image-builder's tarball path): uploaded, then
  # imported into containerd's k8s.io namespace by import-images.sh below.
  provisioner "file" {
    # Beside the template when unset: a relative default would name it from packer's working directory.
    source      = var.images_dir != "" ? "${var.images_dir}/" : "${path.root}/images-none/"
    destination = "${local.build_dir}/images/"
  }

  # growpart (cloud-guest-utils) and resize2fs (e2fsprogs): nodeagent grows the root
  # partition and filesystem at boot with them, as cloud-init did. Cloud images have them;
  # an ISO install may not.
  provisioner "shell" {
    execute_command = local.sudo_exec
    inline = [
      "command -v growpart >/dev/null && command -v resize2fs >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cloud-guest-utils e2fsprogs; }",
    ]
  }

  # Before provision.sh, the last step (it cleans the image).
  provisioner "shell" {
    execute_command = local.sudo_exec
    inline          = ["sh ${local.build_dir}/import-images.sh ${local.build_dir}/images"]
  }

  # vSphere images must keep VMware Tools (CAPV reads the node's IPs through it).
  provisioner "shell" {
    only            = ["vsphere-clone.node", "vsphere-iso.node"]
    execute_command = local.sudo_exec
    inline          = ["sh ${local.build_dir}/provision.sh --require-vmtools ${local.build_dir}/nodeagent.deb"]
  }

  provisioner "shell" {
    only            = ["qemu.node"]
    execute_command = local.sudo_exec
    inline          = ["sh ${local.build_dir}/provision.sh ${local.build_dir}/nodeagent.deb"]
  }

  # The base image's DHCP network file was for the build VM only: a node's network comes
  # from its metadata (nodeagent writes it).
  provisioner "shell" {
    only            = ["qemu.node"]
    execute_command = local.sudo_exec
    inline          = ["rm -f /etc/systemd/network/90-packer-build.network"]
  }

  # Last step before shutdown: the goss-style checks again, as a separate, visible step
  # (provision.sh already ran them; this catches anything a later edit slips in between).
  provisioner "shell" {
    execute_command = local.sudo_exec
    inline          = ["sh ${local.build_dir}/verify.sh ${local.build_dir}/nodeagent.deb", "rm -rf ${local.build_dir}"]
  }

  post-processor "manifest" {
    output     = "${var.output_directory}/packer-manifest.json"
    strip_path = true
  }

  post-processor "shell-local" {
    only   = ["vsphere-clone.node", "vsphere-iso.node"]
    inline = ["sh ${path.root}/scripts/make-ova.sh ${var.output_directory}/${source.type} ${var.output_directory}/${var.image_name}-${source.type}.ova"]
  }

  # The qcow2 as a vSphere-style export (OVF + streamOptimized VMDK), then the same make-ova.sh.
  post-processor "shell-local" {
    only   = ["qemu.node"]
    inline = ["sh ${path.root}/scripts/qemu-ova.sh ${var.output_directory}/qemu/${var.image_name}.qcow2 ${var.output_directory}/ovf ${var.output_directory}/${var.image_name}-qemu.ova"]
  }
}
