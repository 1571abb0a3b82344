//! ## template: jinja detection and sandboxed, bounded minijinja rendering. Owner: core-tmpl.
