//! The formats the agent reads and writes byte for byte: the one bounded YAML reader (PyYAML
//! 1.1 semantics), the one YAML emitter (Go's sigs.k8s.io/yaml output), JSON as Python writes it.

pub mod goyaml;
pub mod pyjson;
pub mod yaml;
