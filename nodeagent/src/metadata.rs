//! Metadata parsing (JSON then YAML), network/redact/wait-on-network/public keys. Owner: core.
