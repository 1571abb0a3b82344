#!/bin/sh
# qemu.node's qcow2 as a vSphere-style export (an OVF descriptor and a streamOptimized
# VMDK, as Packer's vsphere `export {}` writes them), then an OVA with make-ova.sh, the
# script the vSphere sources use. The descriptor follows image-builder's
# hack/ovf_template.xml in shape (one disk on a pvscsi controller, one VmxNet3 NIC on
# network nic0, no vApp properties: CAPV uses guestinfo extraConfig keys).
#
#   qemu-ova.sh IMAGE.qcow2 EXPORT_DIR OUTPUT.ova
set -eu
[ $# -eq 3 ] || { echo "usage: qemu-ova.sh IMAGE.qcow2 EXPORT_DIR OUTPUT.ova" >&2; exit 2; }
img=$1
dir=$2
ova=$3
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$img" ] || { echo "qemu-ova.sh: $img: no such image" >&2; exit 1; }
command -v qemu-img >/dev/null || { echo "qemu-ova.sh: qemu-img missing (apt-get install qemu-utils)" >&2; exit 1; }
name=$(basename "$img" .qcow2)
vmdk=$name-disk-0.vmdk
rm -rf "$dir"
mkdir -p "$dir"
qemu-img convert -O vmdk -o subformat=streamOptimized "$img" "$dir/$vmdk"
json_field() { qemu-img info --output=json "$1" | sed -n "s/^ *\"$2\": *\([0-9]*\),*$/\1/p" | head -1; }
capacity=$(json_field "$img" virtual-size)
file_size=$(stat -c %s "$dir/$vmdk")
[ -n "$capacity" ] || { echo "qemu-ova.sh: cannot read the virtual size of $img" >&2; exit 1; }
cat >"$dir/$name.ovf" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1" xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData" xmlns:vssd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData" xmlns:vmw="http://www.vmware.com/schema/ovf" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <References>
    <File ovf:href="$vmdk" ovf:id="file1" ovf:size="$file_size"/>
  </References>
  <DiskSection>
    <Info>Virtual disk information</Info>
    <Disk ovf:capacity="$capacity" ovf:capacityAllocationUnits="byte" ovf:diskId="vmdisk1" ovf:fileRef="file1" ovf:format="http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"/>
  </DiskSection>
  <NetworkSection>
    <Info>The list of logical networks</Info>
    <Network ovf:name="nic0">
      <Description>The nic0 network</Description>
    </Network>
  </NetworkSection>
  <VirtualSystem ovf:id="$name">
    <Info>A Kubernetes node with nodeagent instead of cloud-init</Info>
    <Name>$name</Name>
    <OperatingSystemSection ovf:id="96" vmw:osType="debian12_64Guest">
      <Info>The kind of installed guest operating system</Info>
    </OperatingSystemSection>
    <VirtualHardwareSection>
      <Info>Virtual hardware requirements</Info>
      <System>
        <vssd:ElementName>Virtual Hardware Family</vssd:ElementName>
        <vssd:InstanceID>0</vssd:InstanceID>
        <vssd:VirtualSystemIdentifier>$name</vssd:VirtualSystemIdentifier>
        <vssd:VirtualSystemType>vmx-15</vssd:VirtualSystemType>
      </System>
      <Item>
        <rasd:AllocationUnits>hertz * 10^6</rasd:AllocationUnits>
        <rasd:Description>Number of Virtual CPUs</rasd:Description>
        <rasd:ElementName>2 virtual CPU(s)</rasd:ElementName>
        <rasd:InstanceID>1</rasd:InstanceID>
        <rasd:ResourceType>3</rasd:ResourceType>
        <rasd:VirtualQuantity>2</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits>
        <rasd:Description>Memory Size</rasd:Description>
        <rasd:ElementName>2048MB of memory</rasd:ElementName>
        <rasd:InstanceID>2</rasd:InstanceID>
        <rasd:ResourceType>4</rasd:ResourceType>
        <rasd:VirtualQuantity>2048</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:Address>0</rasd:Address>
        <rasd:Description>SCSI Controller</rasd:Description>
        <rasd:ElementName>SCSI Controller 0</rasd:ElementName>
        <rasd:InstanceID>3</rasd:InstanceID>
        <rasd:ResourceSubType>VirtualSCSI</rasd:ResourceSubType>
        <rasd:ResourceType>6</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AddressOnParent>0</rasd:AddressOnParent>
        <rasd:ElementName>Hard Disk 1</rasd:ElementName>
        <rasd:HostResource>ovf:/disk/vmdisk1</rasd:HostResource>
        <rasd:InstanceID>4</rasd:InstanceID>
        <rasd:Parent>3</rasd:Parent>
        <rasd:ResourceType>17</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AddressOnParent>7</rasd:AddressOnParent>
        <rasd:AutomaticAllocation>true</rasd:AutomaticAllocation>
        <rasd:Connection>nic0</rasd:Connection>
        <rasd:Description>VmxNet3 ethernet adapter on "nic0"</rasd:Description>
        <rasd:ElementName>Network adapter 1</rasd:ElementName>
        <rasd:InstanceID>5</rasd:InstanceID>
        <rasd:ResourceSubType>VmxNet3</rasd:ResourceSubType>
        <rasd:ResourceType>10</rasd:ResourceType>
      </Item>
      <vmw:Config ovf:required="false" vmw:key="tools.syncTimeWithHost" vmw:value="false"/>
    </VirtualHardwareSection>
  </VirtualSystem>
</Envelope>
EOF
sh "$here/make-ova.sh" "$dir" "$ova"
