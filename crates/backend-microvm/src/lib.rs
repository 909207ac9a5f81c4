//! microVM backend (in progress).
