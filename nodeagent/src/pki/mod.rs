//! PKI inspection and checks with x509-parser (certs command, pre-flight). Owner: kubeadm; hash.rs owned by mint.
