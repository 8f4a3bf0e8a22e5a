//! In-process loopback test plugin built with the SDK.
