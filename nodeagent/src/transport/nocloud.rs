//! Transport nocloud. Owner: core-xport.
