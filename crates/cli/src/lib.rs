//! Pieces of the `stasis` command shared with its integration tests.

pub mod daemon_proc;
