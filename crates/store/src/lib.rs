//! Snapshot store (in progress).
