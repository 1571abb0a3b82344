//! guestinfo value decoding exactly as cloud-init (rstrip, '---', base64/gzip), bounded. Owner: core-xport.
