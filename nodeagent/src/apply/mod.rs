//! Executes a Plan step by step with the journal. Owner: apply.
