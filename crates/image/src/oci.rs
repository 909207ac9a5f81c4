//! oci (in progress)
