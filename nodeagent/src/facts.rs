//! Host facts (hostname, default-route addresses, interfaces, image capabilities), or --facts FILE. Owner: core.
