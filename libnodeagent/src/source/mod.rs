//! The first stage: where bootstrap data comes from (transports, decoding, metadata, the
//! local stage's hand-off and write sandbox, the wait for the network) and what the host and
//! image are (host facts, the image config).

pub mod config;
pub mod decode;
pub mod facts;
pub mod handoff;
pub mod metadata;
pub mod netwait;
pub mod transport;
pub mod writeguard;
