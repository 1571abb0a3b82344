//! Transport dir. Owner: core-xport.
