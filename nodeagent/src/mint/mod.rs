//! nodeagent mint: cluster PKI, CAPI Secrets, tokens, hashes, bootstrap bundles. Owner: mint.
