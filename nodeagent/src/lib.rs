//! nodeagent: a Kubernetes node bootstrap agent that replaces cloud-init on Cluster API
//! nodes, and `mint`, which makes the cluster PKI and per-node bootstrap data.
//!
//! Pipeline (design.md section 2), one module per stage:
//! transport -> decode -> metadata/facts/instance -> template -> cloudconfig -> plan -> apply -> report.

pub mod cli;
pub mod error;
pub mod limits;
pub mod plan;
pub mod redact;
pub mod transport;
