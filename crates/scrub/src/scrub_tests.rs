//! The scrub over a real store and metadata: damage found, counted,
//! audited once, marked; repaired from a local copy; a pass resumes from
//! its cursor.

use super::*;
use stasis_core::BackendKind;
use stasis_store::{MasterKey, NewSnapshot};
use std::path::Path;
use std::sync::Mutex;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    store: Store,
    meta: Meta,
    metrics: Metrics,
    tenant: TenantId,
    /// What the local-copies source answers.
    copies: Arc<Mutex<Vec<(String, PathBuf)>>>,
}

impl Fixture {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let url = format!("file://{}", root.join("store").display());
        let store = Store::open(&url, MasterKey::from_bytes([3; 32]))
            .await
            .unwrap();
        let meta = Meta::open(&root.join("meta.db")).await.unwrap();
        let tenant = TenantId::parse("acme").unwrap();
        meta.ensure_tenant(&tenant, "acme").await.unwrap();
        Fixture {
            _dir: dir,
            root,
            store,
            meta,
            metrics: Metrics::new(),
            tenant,
            copies: Arc::default(),
        }
    }

    fn scrubber(&self) -> Scrubber {
        let c = self.copies.clone();
        let copies: LocalCopies = Arc::new(move |_, _| {
            let v = c.lock().unwrap().clone();
            Box::pin(async move { v })
        });
        Scrubber::new(
            self.store.clone(),
            self.meta.clone(),
            self.metrics.clone(),
            copies,
        )
    }

    /// A snapshot of one 300 kB pseudo-random artifact `data` kept in `src/<n>`.
    async fn snapshot(&self, n: u8) -> (SnapshotId, PathBuf) {
        let src = self.root.join(format!("src{n}"));
        std::fs::create_dir_all(&src).unwrap();
        let mut x = 0x9e3779b97f4a7c15u64 ^ n as u64;
        let data: Vec<u8> = (0..300_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(src.join("data"), data).unwrap();
        let rec = self
            .store
            .put_snapshot(
                NewSnapshot::new(self.tenant.clone(), BackendKind::Process),
                &src,
                &[("data".into(), "fs-tar".into())],
                None,
            )
            .await
            .unwrap();
        (rec.id, src.join("data"))
    }

    /// Truncate the object of the snapshot's first chunk.
    async fn damage(&self, id: &SnapshotId) {
        let sc = self.store.snapshot_chunks(&self.tenant, id).await.unwrap();
        let h = sc.sites[0].addr.to_hex();
        let p = self
            .root
            .join("store/tenants/acme/chunks")
            .join(&h[..2])
            .join(h);
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() / 3]).unwrap();
    }

    async fn audits(&self, action: &str) -> usize {
        self.meta
            .audit_list(Some(&self.tenant), None, 1000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.action == action)
            .count()
    }

    fn counted(&self, result: &str) -> u64 {
        use prometheus::Encoder;
        let mut buf = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&self.metrics.registry().gather(), &mut buf)
            .unwrap();
        let prefix = format!("stasis_store_scrub_chunks_total{{result=\"{result}\"}} ");
        String::from_utf8(buf)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("no {prefix}"))
    }
}

#[test]
fn rates_parse_with_units_and_refuse_nonsense() {
    assert_eq!(parse_rate("0").unwrap(), 0);
    assert_eq!(parse_rate("65536").unwrap(), 65536);
    assert_eq!(parse_rate("512k").unwrap(), 512 << 10);
    assert_eq!(parse_rate("4M").unwrap(), 4 << 20);
    assert_eq!(parse_rate("4MiB").unwrap(), 4 << 20);
    assert_eq!(parse_rate("1g").unwrap(), 1 << 30);
    for bad in ["", "fast", "-1", "4T", "99999999999999999999G", "1.5M"] {
        assert!(parse_rate(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_pace_waits_for_what_was_read_beyond_the_rate() {
    let mut p = Pace::new(1000);
    let w = p.after(1000);
    assert!(
        w > Duration::from_millis(500) && w <= Duration::from_secs(1),
        "{w:?}"
    );
    let w = p.after(1000);
    assert!(w > Duration::from_millis(1500), "{w:?}");
}

#[tokio::test]
async fn damage_without_a_copy_is_counted_marked_and_audited_once() {
    let f = Fixture::new().await;
    let (id, _) = f.snapshot(1).await;
    let (clean, _) = f.snapshot(2).await;
    f.damage(&id).await;
    let s = f.scrubber();
    let rep = s.verify(&Filter::default(), "admin:t").await.unwrap();
    assert_eq!(
        (rep.snapshots, rep.chunks_damaged, rep.chunks_repaired),
        (2, 1, 0)
    );
    assert_eq!(rep.unrepaired(), 1);
    assert_eq!(rep.damaged.len(), 1);
    assert_eq!(rep.damaged[0].snapshot, id.to_string());
    assert_eq!(rep.damaged[0].damaged[0].artifact, "data");
    assert_eq!(f.counted("verified"), rep.chunks_verified);
    assert_eq!(f.counted("damaged"), 1);
    let mark = f.store.damage_of(&f.tenant, &id).await.unwrap().unwrap();
    assert_eq!(mark.chunks.len(), 1);
    assert!(f
        .store
        .damage_of(&f.tenant, &clean)
        .await
        .unwrap()
        .is_none());
    assert_eq!(f.audits("store.damage").await, 1);
    // The same damage found again is not audited again.
    let only = Filter {
        tenant: Some(f.tenant.clone()),
        snapshot: Some(id.clone()),
    };
    let rep = s.verify(&only, "admin:t").await.unwrap();
    assert_eq!((rep.snapshots, rep.chunks_damaged), (1, 1));
    assert_eq!(f.audits("store.damage").await, 1);
    // A restore of it says the damage is known.
    let e = f
        .store
        .restore_snapshot(&f.tenant, &id, &f.root.join("out"), None)
        .await
        .unwrap_err();
    assert!(e.message.contains("known damage"), "{}", e.message);
}

#[tokio::test]
async fn damage_is_repaired_from_a_local_copy_and_the_mark_goes() {
    let f = Fixture::new().await;
    let (id, file) = f.snapshot(1).await;
    f.damage(&id).await;
    let s = f.scrubber();
    s.verify(&Filter::default(), "admin:t").await.unwrap();
    assert!(f.store.damage_of(&f.tenant, &id).await.unwrap().is_some());
    *f.copies.lock().unwrap() = vec![("data".into(), file.clone())];
    let rep = s.verify(&Filter::default(), "admin:t").await.unwrap();
    assert_eq!((rep.chunks_damaged, rep.chunks_repaired), (1, 1));
    assert_eq!(f.counted("repaired"), 1);
    assert!(f.store.damage_of(&f.tenant, &id).await.unwrap().is_none());
    assert_eq!(f.audits("store.repair").await, 1);
    let rep = s.verify(&Filter::default(), "admin:t").await.unwrap();
    assert_eq!(rep.chunks_damaged, 0);
    let out = f.root.join("out");
    f.store
        .restore_snapshot(&f.tenant, &id, &out, None)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(out.join("data")).unwrap(),
        std::fs::read(&file).unwrap()
    );
}

#[tokio::test]
async fn a_pass_goes_on_from_its_cursor_and_removes_it_at_the_end() {
    let f = Fixture::new().await;
    let (a, _) = f.snapshot(1).await;
    let (b, _) = f.snapshot(2).await;
    let (first, second) = if a < b { (a, b) } else { (b, a) };
    // The daemon stopped after the first snapshot: the second is damaged,
    // and so is the first, which this pass must not read again.
    f.damage(&first).await;
    f.damage(&second).await;
    let cfg = ScrubConfig {
        rate: 1 << 30,
        cursor_file: f.root.join("scrub-cursor.json"),
        pass_interval: Duration::from_secs(3600),
    };
    write_cursor(
        &cfg.cursor_file,
        &Cursor {
            tenant: f.tenant.clone(),
            snapshot: first.clone(),
        },
    )
    .unwrap();
    let rep = f.scrubber().pass(&cfg).await.unwrap();
    assert_eq!(rep.snapshots, 1);
    assert_eq!(rep.damaged[0].snapshot, second.to_string());
    assert!(!cfg.cursor_file.exists());
    // The next pass starts from the beginning.
    let rep = f.scrubber().pass(&cfg).await.unwrap();
    assert_eq!((rep.snapshots, rep.chunks_damaged), (2, 2));
}

#[test]
fn a_torn_cursor_restarts_the_pass() {
    let d = tempfile::tempdir().unwrap();
    let p: &Path = &d.path().join("c.json");
    std::fs::write(p, b"{\"tenant\":").unwrap();
    assert!(read_cursor(p).is_none());
}
