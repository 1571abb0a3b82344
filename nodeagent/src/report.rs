//! Status reporting: status.json, guestinfo.nodeagent.status, virtio-serial, sentinel. Owner: kubeadm.
