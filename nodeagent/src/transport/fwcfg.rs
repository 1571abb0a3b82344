//! Transport fwcfg. Owner: core-xport.
