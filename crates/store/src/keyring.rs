//! Key generations: several master keys, several data keys per tenant, the
//! wraps between them, master-key rotation and retirement, per-tenant
//! data-key rotation and crypto-erasure.
//!
//! ```text
//! keycheck                          the first master key's check object (older stores)
//! keychecks/<fp>                    check object of a master key added by rotation
//! tenants/<t>/key                   data key generation 0 wrapped by the master key (older stores)
//! tenants/<t>/dk/<gen:08>.<fp>      'K' 2 <kek flag> sealed data key of generation <gen>,
//!                                   wrapped by master key <fp> (bound to the tenant's
//!                                   key-encryption key when the flag is 1)
//! ```
//!
//! Master-key rotation writes a wrap under the new key *beside* each
//! existing one (create-only, so a rerun skips what is done) and only then
//! switches the current key; retirement deletes the old wraps, refusing while
//! some data key has no other wrap. Every intermediate state leaves every
//! data key readable with the old key, and every rewrapped one with the new.
//!
//! The key-encryption key (KEK) of a tenant lives outside the store (the
//! metadata database, through [`KekSource`]): destroying it makes the
//! tenant's data keys unrecoverable from the store, including from copies
//! and backups of it made earlier.

use crate::crypto::{self, TenantKeys};
use crate::objects::{os_err, tenant_prefix};
use crate::{MasterKey, Store};
use futures::TryStreamExt;
use object_store::path::Path as OPath;
use serde::Serialize;
use stasis_core::{Error, Result, TenantId};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tenant's key-encryption key as the metadata knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kek {
    Key([u8; 32]),
    /// The tenant has none (stores made before key-encryption keys).
    None,
    /// The tenant was erased: its key-encryption key is gone for good.
    Erased,
}

/// Where tenants' key-encryption keys come from (the metadata database).
#[async_trait::async_trait]
pub trait KekSource: Send + Sync {
    /// The tenant's KEK; `create` makes one if the tenant has none yet
    /// (never for an erased tenant).
    async fn tenant_kek(&self, tenant: &TenantId, create: bool) -> Result<Kek>;
}

/// The master keys a store was opened with; `current` wraps new data keys first
/// and seals new secrets and export headers.
#[derive(Clone)]
pub(crate) struct MasterRing {
    pub keys: Vec<MasterKey>,
    pub current: usize,
}

impl MasterRing {
    /// Current key first, then the others.
    fn ordered(&self) -> Vec<MasterKey> {
        let mut v = vec![self.keys[self.current].clone()];
        v.extend(
            self.keys
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != self.current)
                .map(|(_, k)| k.clone()),
        );
        v
    }
}

/// A tenant's data keys by generation, as last loaded.
pub(crate) struct TenantRing {
    gens: BTreeMap<u32, Arc<TenantKeys>>,
    /// Generations this node cannot unwrap (e.g. mid-rotation on a node
    /// holding only the new key): their snapshots, and new puts, are refused.
    failed: BTreeMap<u32, Error>,
    loaded: Instant,
}

/// How long a node trusts its cached view of a tenant's data keys (other
/// nodes may have rotated or erased them meanwhile).
const RING_TTL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Default, Serialize)]
pub struct RotateReport {
    pub fingerprint: String,
    pub tenants: u64,
    /// Data keys wrapped under the new key by this run.
    pub keys_rewrapped: u64,
    /// Data keys a previous run (or a node creating them) had already wrapped.
    pub keys_already: u64,
    /// Tenants skipped because they were erased.
    pub tenants_erased: u64,
    /// The tenants touched, for the audit log.
    pub tenant_ids: Vec<String>,
    pub ms: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RetireReport {
    pub fingerprint: String,
    pub tenants: u64,
    pub wraps_removed: u64,
    pub tenant_ids: Vec<String>,
}

/// A step of [`Store::rotate_master_key`], for tests that stop it there.
pub type StepHook<'a> = &'a (dyn Fn(&str) -> Result<()> + Sync);

const WRAP_MAGIC: u8 = b'K';
const WRAP_V2: u8 = 2;

struct Wrap {
    gen: u32,
    /// None: the older `tenants/<t>/key` object (generation 0, no fingerprint).
    fp: Option<String>,
    path: OPath,
}

fn wrap_path(t: &TenantId, gen: u32, fp: &str) -> OPath {
    OPath::from(format!("{}/dk/{gen:08}.{fp}", tenant_prefix(t)))
}
fn legacy_key_path(t: &TenantId) -> OPath {
    OPath::from(format!("{}/key", tenant_prefix(t)))
}
fn keycheck_path(fp: &str) -> OPath {
    OPath::from(format!("keychecks/{fp}"))
}

fn no_step(_: &str) -> Result<()> {
    Ok(())
}

impl Store {
    fn ring(&self) -> MasterRing {
        self.inner.masters.read().unwrap().clone()
    }

    /// The master key that seals new things.
    pub(crate) fn master(&self) -> MasterKey {
        let r = self.inner.masters.read().unwrap();
        r.keys[r.current].clone()
    }

    /// Every master key this store holds, current first.
    pub(crate) fn masters(&self) -> Vec<MasterKey> {
        self.ring().ordered()
    }

    /// Fingerprints of the master keys this store holds, current first.
    pub fn master_fingerprints(&self) -> Vec<String> {
        self.masters().iter().map(|k| k.fingerprint()).collect()
    }

    pub fn current_master_fingerprint(&self) -> String {
        self.master().fingerprint()
    }

    /// Hold one more master key (a rotation target); returns its fingerprint.
    pub fn add_master_key(&self, key: MasterKey) -> String {
        let fp = key.fingerprint();
        let mut r = self.inner.masters.write().unwrap();
        if !r.keys.iter().any(|k| k.fingerprint() == fp) {
            r.keys.push(key);
        }
        fp
    }

    /// Make the held key `fp` the one that wraps and seals new things.
    pub fn set_current_master(&self, fp: &str) -> Result<()> {
        let mut r = self.inner.masters.write().unwrap();
        let i = r
            .keys
            .iter()
            .position(|k| k.fingerprint() == fp)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "master key {fp} is not among the keys given to this node"
                ))
            })?;
        r.current = i;
        Ok(())
    }

    /// Tenants' key-encryption keys come from `src` from now on.
    pub fn set_kek_source(&self, src: Arc<dyn KekSource>) {
        *self.inner.kek.write().unwrap() = Some(src);
        self.inner.keys.lock().unwrap().clear();
    }

    async fn kek(&self, t: &TenantId, create: bool) -> Result<Kek> {
        let src = self.inner.kek.read().unwrap().clone();
        match src {
            Some(s) => s.tenant_kek(t, create).await,
            None => Ok(Kek::None),
        }
    }

    /// At open: at least one held key must be one the store knows (a check
    /// object it opens); a fresh store is sealed with the first key.
    pub(crate) async fn check_master_keys(&self) -> Result<()> {
        let ring = self.ring();
        let mut verified: Vec<usize> = Vec::new();
        for (i, k) in ring.keys.iter().enumerate() {
            if let Some(b) = self.get_bytes(&keycheck_path(&k.fingerprint())).await? {
                check_open(k, &b).map_err(|_| {
                    crypto::wrong_master_key(&format!("key check of {}", k.fingerprint()))
                })?;
                verified.push(i);
            }
        }
        let legacy = OPath::from("keycheck");
        for _ in 0..3 {
            if let Some(b) = self.get_bytes(&legacy).await? {
                for (i, k) in ring.keys.iter().enumerate() {
                    if !verified.contains(&i) && check_open(k, &b).is_ok() {
                        verified.push(i);
                    }
                }
                break;
            }
            let any_new = !self.list_paths(&OPath::from("keychecks")).await?.is_empty();
            if any_new {
                break;
            }
            let sealed = crypto::seal(
                &ring.keys[0].wrap_key(),
                crypto::KEYCHECK_AAD,
                crypto::KEYCHECK_PLAIN,
            );
            if self.put_create(&legacy, sealed).await? {
                verified.push(0);
                break;
            }
        }
        let Some(first) = verified.iter().min() else {
            return Err(crypto::wrong_master_key(&format!(
                "store {}",
                self.inner.label
            )));
        };
        self.inner.masters.write().unwrap().current = *first;
        Ok(())
    }

    pub(crate) async fn list_paths(&self, prefix: &OPath) -> Result<Vec<OPath>> {
        let metas: Vec<_> = self
            .os()
            .list(Some(prefix))
            .try_collect()
            .await
            .map_err(os_err)?;
        Ok(metas.into_iter().map(|m| m.location).collect())
    }

    async fn list_wraps(&self, t: &TenantId) -> Result<BTreeMap<u32, Vec<Wrap>>> {
        let mut out: BTreeMap<u32, Vec<Wrap>> = BTreeMap::new();
        let prefix = OPath::from(format!("{}/dk", tenant_prefix(t)));
        for p in self.list_paths(&prefix).await? {
            let Some((g, fp)) = p.filename().and_then(|f| f.split_once('.')) else {
                continue;
            };
            let Ok(gen) = g.parse::<u32>() else { continue };
            out.entry(gen).or_default().push(Wrap {
                gen,
                fp: Some(fp.to_string()),
                path: p.clone(),
            });
        }
        let legacy = legacy_key_path(t);
        match self.os().head(&legacy).await {
            Ok(_) => out.entry(0).or_default().push(Wrap {
                gen: 0,
                fp: None,
                path: legacy,
            }),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(os_err(e)),
        }
        Ok(out)
    }

    fn seal_wrap(
        t: &TenantId,
        gen: u32,
        mk: &MasterKey,
        kek: Option<&[u8; 32]>,
        dk: &[u8; 32],
    ) -> Vec<u8> {
        let mut wk = mk.tenant_wrap_key(kek);
        let aad = crypto::tenant_key_aad_v2(t.as_str(), gen, &mk.fingerprint());
        let mut out = vec![WRAP_MAGIC, WRAP_V2, kek.is_some() as u8];
        out.extend_from_slice(&crypto::seal(&wk, &aad, dk));
        crypto::wipe_key(&mut wk);
        out
    }

    fn open_wrap(t: &TenantId, w: &Wrap, b: &[u8], kek: &Kek, mk: &MasterKey) -> Result<[u8; 32]> {
        let what = format!("data key generation {} of tenant {t}", w.gen);
        let plain = match &w.fp {
            None => crypto::open(
                &mk.wrap_key(),
                &crypto::tenant_key_aad(t.as_str()),
                b,
                &what,
            )?,
            Some(fp) => {
                if b.len() < 3 || b[0] != WRAP_MAGIC || b[1] != WRAP_V2 {
                    return Err(Error::integrity(format!("{what}: bad header")));
                }
                let kek = match (b[2], kek) {
                    (0, _) => None,
                    (1, Kek::Key(k)) => Some(k),
                    (1, _) => {
                        return Err(Error::integrity(format!(
                            "{what}: bound to the tenant's key-encryption key, which this \
                             deployment does not hold (the tenant was erased)"
                        )))
                    }
                    _ => return Err(Error::integrity(format!("{what}: bad header"))),
                };
                let mut wk = mk.tenant_wrap_key(kek);
                let r = crypto::open(
                    &wk,
                    &crypto::tenant_key_aad_v2(t.as_str(), w.gen, fp),
                    &b[3..],
                    &what,
                );
                crypto::wipe_key(&mut wk);
                r?
            }
        };
        plain
            .as_slice()
            .try_into()
            .map_err(|_| Error::integrity(format!("{what}: wrong length")))
    }

    /// The data key of one generation, from any wrap a held key opens.
    async fn unwrap_gen(
        &self,
        t: &TenantId,
        gen: u32,
        wraps: &[Wrap],
        kek: &Kek,
        masters: &[MasterKey],
    ) -> Result<Option<[u8; 32]>> {
        let mut err = None;
        let mut seen = false;
        for w in wraps {
            let cands: Vec<&MasterKey> = match &w.fp {
                Some(fp) => masters.iter().filter(|k| &k.fingerprint() == fp).collect(),
                None => masters.iter().collect(),
            };
            if cands.is_empty() {
                continue;
            }
            let Some(b) = self.get_bytes(&w.path).await? else {
                continue;
            };
            seen = true;
            for mk in cands {
                match Self::open_wrap(t, w, &b, kek, mk) {
                    Ok(k) => return Ok(Some(k)),
                    Err(e) => err = Some(e),
                }
            }
        }
        match err {
            Some(e) => Err(e.context("the tenant's wrapped data key is corrupt or was replaced")),
            None if seen || wraps.is_empty() => Ok(None),
            None => {
                let fps: Vec<&str> = wraps.iter().filter_map(|w| w.fp.as_deref()).collect();
                Err(Error::integrity(format!(
                    "data key generation {gen} of tenant {t} is wrapped only under master keys \
                     this node does not hold ({})",
                    fps.join(", ")
                )))
            }
        }
    }

    async fn load_ring(&self, t: &TenantId) -> Result<TenantRing> {
        let mut gens = BTreeMap::new();
        let mut failed = BTreeMap::new();
        let kek = self.kek(t, false).await?;
        if kek != Kek::Erased {
            let masters = self.masters();
            for (gen, ws) in self.list_wraps(t).await? {
                match self.unwrap_gen(t, gen, &ws, &kek, &masters).await {
                    Ok(Some(mut dk)) => {
                        gens.insert(gen, Arc::new(TenantKeys::derive(gen, &dk)));
                        crypto::wipe_key(&mut dk);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        failed.insert(gen, e);
                    }
                }
            }
        }
        Ok(TenantRing {
            gens,
            failed,
            loaded: Instant::now(),
        })
    }

    async fn ring_for(&self, t: &TenantId, fresh: bool) -> Result<Arc<TenantRing>> {
        if !fresh {
            if let Some(r) = self.inner.keys.lock().unwrap().get(t.as_str()) {
                if r.loaded.elapsed() < RING_TTL {
                    return Ok(r.clone());
                }
            }
        }
        let r = Arc::new(self.load_ring(t).await?);
        let mut cache = self.inner.keys.lock().unwrap();
        if r.gens.is_empty() || !r.failed.is_empty() {
            cache.remove(t.as_str());
        } else {
            cache.insert(t.as_str().to_string(), r.clone());
        }
        Ok(r)
    }

    /// The tenant's newest data key (what new snapshots are sealed with);
    /// `create` makes the first one (puts only).
    pub(crate) async fn tenant_keys(
        &self,
        tenant: &TenantId,
        create: bool,
    ) -> Result<Option<Arc<TenantKeys>>> {
        for fresh in [false, true] {
            let r = self.ring_for(tenant, fresh).await?;
            if let Some(e) = r.failed.values().next() {
                return Err(e.clone());
            }
            if let Some((_, k)) = r.gens.iter().next_back() {
                return Ok(Some(k.clone()));
            }
            if !create {
                return Ok(None);
            }
            if fresh {
                break;
            }
            self.create_gen(tenant, 0).await?;
        }
        Err(Error::internal("tenant key: could not create or read"))
    }

    /// The tenant's data key of generation `gen` (what an older snapshot needs).
    pub(crate) async fn tenant_keys_gen(
        &self,
        tenant: &TenantId,
        gen: u32,
    ) -> Result<Option<Arc<TenantKeys>>> {
        for fresh in [false, true] {
            let r = self.ring_for(tenant, fresh).await?;
            if let Some(k) = r.gens.get(&gen) {
                return Ok(Some(k.clone()));
            }
            if let Some(e) = r.failed.get(&gen) {
                return Err(e.clone());
            }
        }
        Ok(None)
    }

    /// Make data key `gen`, wrapped under every held master key (current
    /// first, create-only: of two nodes racing, one key wins).
    async fn create_gen(&self, t: &TenantId, gen: u32) -> Result<bool> {
        let kek = match self.kek(t, true).await? {
            Kek::Key(k) => Some(k),
            Kek::None => None,
            Kek::Erased => return Err(Error::state(format!("tenant {t} was erased"))),
        };
        let mut dk: [u8; 32] = crypto::random_bytes();
        let masters = self.masters();
        let first = &masters[0];
        let won = self
            .put_create(
                &wrap_path(t, gen, &first.fingerprint()),
                Self::seal_wrap(t, gen, first, kek.as_ref(), &dk),
            )
            .await?;
        if won {
            for mk in &masters[1..] {
                self.put_create(
                    &wrap_path(t, gen, &mk.fingerprint()),
                    Self::seal_wrap(t, gen, mk, kek.as_ref(), &dk),
                )
                .await?;
            }
        }
        crypto::wipe_key(&mut dk);
        Ok(won)
    }

    /// A new data key for the tenant: new snapshots are sealed with it, older
    /// ones keep being read with theirs. Returns the new generation.
    pub async fn rotate_tenant_key(&self, t: &TenantId) -> Result<u32> {
        let r = self.ring_for(t, true).await?;
        if let Some(e) = r.failed.values().next() {
            return Err(e.clone());
        }
        let next = r.gens.keys().next_back().map(|g| g + 1).unwrap_or(0);
        self.create_gen(t, next).await?;
        self.inner.keys.lock().unwrap().remove(t.as_str());
        Ok(next)
    }

    /// Data-key generations of a tenant and the master keys wrapping each
    /// (`legacy`: the older single-wrap object).
    pub async fn tenant_key_generations(&self, t: &TenantId) -> Result<BTreeMap<u32, Vec<String>>> {
        Ok(self
            .list_wraps(t)
            .await?
            .into_iter()
            .map(|(g, ws)| {
                (
                    g,
                    ws.iter()
                        .map(|w| w.fp.clone().unwrap_or_else(|| "legacy".into()))
                        .collect(),
                )
            })
            .collect())
    }

    /// Wrap every data key of every tenant under the held master key `fp`
    /// as well, then make it current. Online, create-only and idempotent.
    pub async fn rotate_master_key(&self, fp: &str) -> Result<RotateReport> {
        self.rotate_master_key_with(fp, &no_step).await
    }

    /// [`Store::rotate_master_key`] calling `step` before each write
    /// (`register`, `rewrap`, `switch`); an error from it stops the run there.
    pub async fn rotate_master_key_with(
        &self,
        fp: &str,
        step: StepHook<'_>,
    ) -> Result<RotateReport> {
        let started = Instant::now();
        let masters = self.masters();
        let new = masters
            .iter()
            .find(|k| k.fingerprint() == fp)
            .cloned()
            .ok_or_else(|| Error::invalid(format!("master key {fp} is not held by this node")))?;
        step("register")?;
        let check = keycheck_path(fp);
        let sealed = crypto::seal(
            &new.wrap_key(),
            crypto::KEYCHECK_AAD,
            crypto::KEYCHECK_PLAIN,
        );
        if !self.put_create(&check, sealed).await? {
            let b = self.get_bytes(&check).await?.unwrap_or_default();
            check_open(&new, &b).map_err(|_| crypto::wrong_master_key("the new key's check"))?;
        }
        let mut rep = RotateReport {
            fingerprint: fp.to_string(),
            ..Default::default()
        };
        for t in self.list_tenants().await? {
            let mut kek = self.kek(&t, false).await?;
            if kek == Kek::Erased {
                rep.tenants_erased += 1;
                continue;
            }
            let wraps = self.list_wraps(&t).await?;
            if wraps.is_empty() {
                continue;
            }
            rep.tenants += 1;
            rep.tenant_ids.push(t.to_string());
            for (gen, ws) in wraps {
                if ws.iter().any(|w| w.fp.as_deref() == Some(fp)) {
                    rep.keys_already += 1;
                    continue;
                }
                let Some(mut dk) = self.unwrap_gen(&t, gen, &ws, &kek, &masters).await? else {
                    continue; // deleted meanwhile
                };
                if kek == Kek::None {
                    // Older tenants get a key-encryption key now: erasable from here on.
                    kek = self.kek(&t, true).await?;
                }
                let k = match &kek {
                    Kek::Key(k) => Some(k),
                    _ => None,
                };
                step("rewrap")?;
                self.put_create(
                    &wrap_path(&t, gen, fp),
                    Self::seal_wrap(&t, gen, &new, k, &dk),
                )
                .await?;
                crypto::wipe_key(&mut dk);
                rep.keys_rewrapped += 1;
            }
        }
        step("switch")?;
        self.set_current_master(fp)?;
        rep.ms = started.elapsed().as_millis() as u64;
        Ok(rep)
    }

    /// Delete every wrap made by master key `fp` (and its check object),
    /// refusing, before deleting anything, while some data key has no other wrap.
    pub async fn retire_master_key(&self, fp: &str) -> Result<RetireReport> {
        if self.current_master_fingerprint() == fp {
            return Err(Error::state(format!(
                "master key {fp} is the current one: rotate to a new key first"
            )));
        }
        let masters = self.masters();
        let old = masters.iter().find(|k| k.fingerprint() == fp).cloned();
        let mut stuck: Vec<String> = Vec::new();
        let mut plan: Vec<(TenantId, Vec<OPath>)> = Vec::new();
        for t in self.list_tenants().await? {
            if self.kek(&t, false).await? == Kek::Erased {
                continue;
            }
            let mut del = Vec::new();
            for (gen, ws) in self.list_wraps(&t).await? {
                let mut olds = Vec::new();
                let mut others = 0;
                for w in &ws {
                    let under_old = match &w.fp {
                        Some(f) => f == fp,
                        None => match &old {
                            Some(k) => {
                                let b = self.get_bytes(&w.path).await?.unwrap_or_default();
                                crypto::open(
                                    &k.wrap_key(),
                                    &crypto::tenant_key_aad(t.as_str()),
                                    &b,
                                    "",
                                )
                                .is_ok()
                            }
                            None => true,
                        },
                    };
                    if under_old {
                        olds.push(w.path.clone());
                    } else {
                        others += 1;
                    }
                }
                if olds.is_empty() {
                    continue;
                }
                if others == 0 {
                    stuck.push(format!("{t} generation {gen}"));
                } else {
                    del.extend(olds);
                }
            }
            if !del.is_empty() {
                plan.push((t, del));
            }
        }
        if !stuck.is_empty() {
            let n = stuck.len();
            stuck.truncate(5);
            return Err(Error::state(format!(
                "{n} data key(s) are still wrapped only under master key {fp} ({}{}): \
                 run `stasis admin rotate-master-key` again",
                stuck.join(", "),
                if n > 5 { ", ..." } else { "" }
            )));
        }
        let mut rep = RetireReport {
            fingerprint: fp.to_string(),
            ..Default::default()
        };
        for (t, paths) in plan {
            for p in paths {
                match self.os().delete(&p).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => rep.wraps_removed += 1,
                    Err(e) => return Err(os_err(e)),
                }
            }
            rep.tenants += 1;
            rep.tenant_ids.push(t.to_string());
        }
        self.delete_quiet(&keycheck_path(fp)).await?;
        if let Some(k) = &old {
            let legacy = OPath::from("keycheck");
            if let Some(b) = self.get_bytes(&legacy).await? {
                if check_open(k, &b).is_ok() {
                    self.delete_quiet(&legacy).await?;
                }
            }
        }
        {
            let mut r = self.inner.masters.write().unwrap();
            let cur = r.keys[r.current].fingerprint();
            r.keys.retain(|k| k.fingerprint() != fp);
            r.current = r
                .keys
                .iter()
                .position(|k| k.fingerprint() == cur)
                .unwrap_or(0);
        }
        self.inner.keys.lock().unwrap().clear();
        Ok(rep)
    }

    async fn delete_quiet(&self, p: &OPath) -> Result<()> {
        match self.os().delete(p).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(os_err(e)),
        }
    }

    /// Crypto-erasure, store half: delete every wrap of the tenant's data
    /// keys (the key-encryption key, held by the caller, goes first).
    pub async fn erase_tenant_keys(&self, t: &TenantId) -> Result<u64> {
        let mut n = 0;
        for (_, ws) in self.list_wraps(t).await? {
            for w in ws {
                self.delete_quiet(&w.path).await?;
                n += 1;
            }
        }
        self.inner.keys.lock().unwrap().remove(t.as_str());
        Ok(n)
    }

    /// Delete every object of the tenant (after erasure: the bytes nobody can read).
    pub async fn purge_tenant(&self, t: &TenantId) -> Result<u64> {
        let mut n = 0;
        for p in self.list_paths(&OPath::from(tenant_prefix(t))).await? {
            self.delete_quiet(&p).await?;
            n += 1;
        }
        self.inner.keys.lock().unwrap().remove(t.as_str());
        Ok(n)
    }

    /// Whether the tenant's key-encryption key says it was erased.
    pub(crate) async fn is_erased(&self, t: &TenantId) -> Result<bool> {
        Ok(self.kek(t, false).await? == Kek::Erased)
    }
}

fn check_open(k: &MasterKey, b: &[u8]) -> Result<()> {
    let plain = crypto::open(&k.wrap_key(), crypto::KEYCHECK_AAD, b, "keycheck")?;
    if plain != crypto::KEYCHECK_PLAIN {
        return Err(crypto::wrong_master_key("keycheck"));
    }
    Ok(())
}
