//! Process backend (in progress).
