//! The second stage: the instance data templates see, `## template: jinja` rendering, and
//! the typed cloud-config.

pub mod cloudconfig;
pub mod instance;
pub mod template;
