//! `cargo run -p stasis-store --example store_bench -- [MiB] [min avg max KiB]`:
//! the synthetic two-snapshot benchmark on a local-dir store in a temp dir, JSON on stdout.
//! `... --example store_bench -- ram [MiB]`: a guest-RAM-like file put twice, cut
//! into 64 KiB blocks vs content-defined chunks (`bench::bench_ram`).
use stasis_store::{bench, MasterKey, Store, StoreConfig};

#[tokio::main]
async fn main() {
    let ram = std::env::args().nth(1).as_deref() == Some("ram");
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let mib = args.first().copied().unwrap_or(64);
    let mut cfg = StoreConfig::default();
    if args.len() >= 4 {
        cfg.chunk_min = (args[1] * 1024) as u32;
        cfg.chunk_avg = (args[2] * 1024) as u32;
        cfg.chunk_max = (args[3] * 1024) as u32;
    }
    let dir = std::env::temp_dir().join(format!("stasis-store-bench-{}", std::process::id()));
    let store = Store::open_with_config(
        &format!("file://{}/store", dir.display()),
        MasterKey::insecure_dev(),
        cfg,
    )
    .await
    .expect("open store");
    if ram {
        let mib = if args.is_empty() { 256 } else { mib };
        let rep = bench::bench_ram(&store, &dir.join("scratch"), mib << 20, 64 * 1024)
            .await
            .expect("bench");
        println!("{}", serde_json::to_string_pretty(&rep).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let t = stasis_core::TenantId::parse("t-bench").unwrap();
    let rep = bench::bench_synthetic(&store, &t, &dir.join("scratch"), mib << 20)
        .await
        .expect("bench");
    println!("{}", serde_json::to_string_pretty(&rep).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}
