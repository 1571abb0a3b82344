# Example values (owner: pack). CI validates the template with this file; copy it and
# fill in real ones for a build. Long unique dummy strings: packer masks every occurrence
# of a sensitive value in its output, and short ones garble messages.
deb              = "../target/debian/nodeagent.deb"
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
