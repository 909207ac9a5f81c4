//! build (in progress)
