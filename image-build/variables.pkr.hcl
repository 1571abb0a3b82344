# Variables of the node image build. Kept within what Debian's packer 1.6.6
# understands: no `packer { required_plugins }` block, no regex() in validations.
# Dummy values for `packer validate` are in example.pkrvars.hcl.

# ---------------------------------------------------------------- what goes in
variable "deb" {
  type        = string
  description = "Path of the nodeagent .deb to bake in (packaging/build-deb writes target/debian/nodeagent_<version>_<arch>.deb)."
}

variable "images_dir" {
  type        = string
  default     = ""
  description = "Directory of container image archives (*.tar, docker-save or OCI) and images.txt, imported into containerd's k8s.io namespace (image-build/k8s-images makes them for a control plane; a directory without archives imports nothing). Empty: image-build/images-none, which imports nothing."
}

variable "image_name" {
  type        = string
  default     = "nodeagent-node"
  description = "Base name of the VM, template and exported files."
}

variable "output_directory" {
  type        = string
  default     = "output"
  description = "Where exported OVF/VMDK (vSphere) or qcow2 (qemu) files go; relative to the working directory."
}

# ---------------------------------------------------------------- SSH into the build VM
variable "ssh_username" {
  type        = string
  default     = "builder"
  description = "Build user with passwordless sudo (image-builder's convention); deleted at shutdown."
}

variable "ssh_password" {
  type        = string
  sensitive   = true
  description = "Password of the build user (the preseed/NoCloud seed sets it; the user is deleted at shutdown)."
}

# ---------------------------------------------------------------- vCenter placement
variable "vcenter_server" {
  type    = string
  default = ""
}

variable "vcenter_username" {
  type    = string
  default = ""
}

variable "vcenter_password" {
  type      = string
  default   = ""
  sensitive = true
}

variable "vcenter_insecure" {
  type        = bool
  default     = false
  description = "Skip TLS verification of vCenter (lab setups with self-signed certificates only)."
}

variable "datacenter" {
  type    = string
  default = ""
}

variable "cluster" {
  type    = string
  default = ""
}

variable "datastore" {
  type    = string
  default = ""
}

variable "folder" {
  type    = string
  default = ""
}

variable "resource_pool" {
  type    = string
  default = ""
}

variable "network" {
  type        = string
  default     = ""
  description = "Port group the build VM is attached to; needs DHCP and a route to the Debian mirror (vsphere-iso)."
}

variable "template" {
  type        = string
  default     = ""
  description = "vsphere-clone: existing node template to clone (e.g. an image-builder CAPV OVA imported as template)."
}

variable "linked_clone" {
  type    = bool
  default = false
}

variable "convert_to_template" {
  type        = bool
  default     = false
  description = "Also keep the result as a vSphere template (besides the exported OVF)."
}

# ---------------------------------------------------------------- VM shape
variable "cpus" {
  type    = number
  default = 2
}

variable "memory_mb" {
  type    = number
  default = 4096
}

variable "disk_size_mb" {
  type    = number
  default = 20480
}

# ---------------------------------------------------------------- vsphere-iso: install from ISO
# Required, no defaults: where images and packages come from is the builder's choice (their
# own mirror or Debian's); example.pkrvars.hcl shows the form.
variable "iso_url" {
  type        = string
  description = "vsphere-iso: Debian 12 netinst ISO (URL or local path), downloaded by Packer and uploaded to the datastore."
}

variable "iso_checksum" {
  type        = string
  description = "vsphere-iso: checksum of the ISO (sha256:HEX, or file:URL of a SUMS file)."
}

variable "debian_mirror_host" {
  type        = string
  description = "vsphere-iso: host name of the Debian archive mirror the installer uses (put on the installer boot line)."
}

variable "debian_mirror_directory" {
  type        = string
  default     = "/debian"
  description = "vsphere-iso: directory of the Debian archive on debian_mirror_host."
}

variable "guest_os_type" {
  type    = string
  default = "debian12_64Guest"
}

# ---------------------------------------------------------------- qemu: offline local image
# image-build/build-qemu sets the base_* variables from image-build/base-image's output.
variable "base_image" {
  type        = string
  default     = "target/image-build/base/plain/disk.raw"
  description = "qemu: base disk image (image-build/base-image: Debian packages, sshd, the build user)."
}

variable "base_image_checksum" {
  type        = string
  description = "qemu: checksum of base_image (sha256:HEX, computed locally by image-build/build-qemu)."
}

variable "base_kernel" {
  type        = string
  default     = "target/image-build/base/plain/vmlinuz"
  description = "qemu: kernel booted with -kernel (Debian's cloud kernel, from image-build/base-image)."
}

variable "base_initrd" {
  type        = string
  default     = "target/image-build/base/plain/initrd"
  description = "qemu: initramfs booted with -initrd (mounts root=/dev/vda1)."
}

variable "qemu_accelerator" {
  type        = string
  default     = "tcg"
  description = "qemu: tcg (works everywhere, slow); kvm where /dev/kvm exists."
}

variable "qemu_binary" {
  type    = string
  default = "qemu-system-x86_64"
}

variable "qemu_cpus" {
  type    = number
  default = 1
}

variable "qemu_memory_mb" {
  type    = number
  default = 1024
}

variable "qemu_disk_compression" {
  type        = bool
  default     = false
  description = "qemu: compress the qcow2 (smaller, but a single-threaded pass over the whole disk)."
}
