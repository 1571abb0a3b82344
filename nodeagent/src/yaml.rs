//! YAML 1.1 loader (as PyYAML safe_load resolves scalars) with line/column for every node, bounded depth and aliases. Owner: core.
