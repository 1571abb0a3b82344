//! Image configuration /etc/nodeagent/config.yaml. Owner: core (fields added by each stage).
