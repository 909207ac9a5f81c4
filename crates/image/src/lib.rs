//! stasis images: root filesystems built from layers.
//!
//! - [`layer`]: apply a layer tar (plain, gzip, zstd) onto a root directory
//!   safely, and write a directory of changes back out as a layer.
//! - [`oci`]: import an OCI image layout tar or a `docker save` tar.
//! - [`store`]: images by name[:tag] and digest, per tenant or public, with
//!   content-addressed layers stored once and a GC that spares what is in use.
//! - [`dockerfile`]: the supported Dockerfile subset, parsed with line numbers.
//! - [`guest`]: a microVM guest image (qcow2 root disk) made from an image.
//! - [`build`]: executes a parsed Dockerfile with a per-step cache; `RUN`
//!   steps go to a [`build::StepRunner`] the daemon implements.
//! - [`context`]: the build context: sources that cannot leave it, their
//!   digest, `COPY` and `ADD` (a local archive unpacked) into a step.

pub mod build;
pub mod context;
pub mod digest;
pub mod dockerfile;
pub mod guest;
pub mod layer;
pub mod oci;
mod owned;
pub mod store;

pub use digest::Digest;

// Tests build fixtures on their own temp directories, by path.
#[cfg(test)]
#[allow(clippy::disallowed_methods)]
#[path = "safety_tests.rs"]
mod safety_tests;
