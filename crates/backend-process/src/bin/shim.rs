//! The sandbox shim as its own executable (tests, debugging). The `stasis`
//! binary runs the same code as `stasis __process-shim <mode> <config>`.
fn main() {
    stasis_backend_process::shim_main()
}
