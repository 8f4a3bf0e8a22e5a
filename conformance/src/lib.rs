//! Conformance suite for any `ncclNet` plugin.
