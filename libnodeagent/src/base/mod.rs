//! What every stage stands on: the one error type, the limits on input, redaction, the
//! confined root, the one atomic writer, the one way to run a program (and its supervisor), the
//! boot priority, the render sandbox, the agent's logs and its per-instance journal.

pub mod confine;
pub mod error;
pub mod fsio;
pub mod limits;
pub mod outlog;
pub mod priority;
pub mod process;
pub mod redact;
pub mod sandbox;
pub mod state;
pub mod supervise;
