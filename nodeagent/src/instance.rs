//! cloud-init-compatible instance data (v1.*, ds.meta_data.*, aliases). Owner: core.
