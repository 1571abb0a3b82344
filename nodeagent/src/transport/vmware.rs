//! Transport vmware. Owner: core-xport.
