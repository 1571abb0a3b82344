//! read -> decode -> instance data -> render -> cloud-config -> plan, as one pure-ish function. Owner: core.
