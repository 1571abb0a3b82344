//! /var/lib/nodeagent: per-instance journal of finished steps, crash-safe. Owner: apply.
