//! dockerfile (in progress)
