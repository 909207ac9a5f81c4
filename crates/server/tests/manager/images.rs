//! Image tenancy on every path a manifest enters: another tenant's image,
//! by name or id, is refused (and audited) at create, at restore with a
//! manifest and at create from a template; the tenant's own and the public
//! images are pinned to their ids; a restore without a manifest keeps the
//! snapshot's image even after its name is gone.

use super::harness::*;
use stasis_core::{ErrorCode, TenantId};
use stasis_image::layer::ApplyOptions;
use stasis_image::store::Owner;
use stasis_server::images::Images;
use stasis_server::{Ctx, Manager};

fn other_tenant() -> Ctx {
    Ctx {
        tenant: TenantId::parse("t-other").unwrap(),
        actor: "other".into(),
    }
}

/// An image of `owner` named `name:1` (a directory used in place).
fn image_of(images: &Images, root: &std::path::Path, owner: Owner, name: &str) -> String {
    let dir = root.join(format!("dir-{name}"));
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::write(dir.join("bin").join(name), name).unwrap();
    images
        .store()
        .commit(
            &owner,
            name,
            "1",
            Some(&dir),
            vec![],
            Default::default(),
            vec![],
            &ApplyOptions::default(),
        )
        .unwrap()
        .record
        .id
        .to_string()
}

async fn refusals(m: &Manager, ctx: &Ctx) -> usize {
    m.meta()
        .audit_list(Some(&ctx.tenant), None, 1000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.action == "refused")
        .count()
}

#[tokio::test]
async fn another_tenants_image_is_refused_on_every_path() {
    let env = Env::process();
    let m = env.manager().await;
    let images = Images::open(&env.root.join("images-store")).unwrap();
    m.set_images(images.clone());
    let mine = image_of(
        &images,
        &env.root,
        Owner::Tenant(ctx().tenant.to_string()),
        "mine",
    );
    let theirs = image_of(
        &images,
        &env.root,
        Owner::Tenant(other_tenant().tenant.to_string()),
        "theirs",
    );
    let public = image_of(&images, &env.root, Owner::Public, "pub");

    // Create: theirs is not found by id; mine and public pin to their ids.
    let mut man = manifest();
    man.image = Some(theirs.clone());
    let err = m.create(&ctx(), man.clone()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidManifest, "{err:?}");
    assert!(err.message.contains("not found"), "{err:?}");
    let mut own = manifest();
    own.image = Some("mine:1".into());
    let src = m.create(&ctx(), own).await.unwrap();
    assert_eq!(src.manifest.image.as_deref(), Some(mine.as_str()));
    let snap = m.snapshot(&ctx(), &src.id, None).await.unwrap();

    // Restore with a manifest naming theirs: refused, audited, nothing left.
    let before = refusals(&m, &ctx()).await;
    let sandboxes = m
        .meta()
        .list(Some(&ctx().tenant), None)
        .await
        .unwrap()
        .len();
    let err = m
        .restore(&ctx(), &snap.id, Some(man.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidManifest, "{err:?}");
    assert_eq!(err.field.as_deref(), Some("image"));
    assert_eq!(refusals(&m, &ctx()).await, before + 1);
    assert_eq!(
        m.meta()
            .list(Some(&ctx().tenant), None)
            .await
            .unwrap()
            .len(),
        sandboxes,
        "a refused restore leaves no record"
    );
    // The same answer as an image that does not exist at all.
    let mut nosuch = manifest();
    nosuch.image = Some(format!("sha256:{}", "0".repeat(64)));
    let err2 = m.restore(&ctx(), &snap.id, Some(nosuch)).await.unwrap_err();
    assert_eq!(err2.code, err.code);

    // Create from a template with theirs as the override: refused, audited.
    m.create_template(&ctx(), "t", &src.id).await.unwrap();
    let before = refusals(&m, &ctx()).await;
    let err = m
        .create_from_template(&ctx(), "t", Some(man.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidManifest, "{err:?}");
    assert_eq!(refusals(&m, &ctx()).await, before + 1);

    // The public image and the tenant's own are fine, pinned to their ids.
    let mut p = manifest();
    p.image = Some("pub:1".into());
    let r = m.restore(&ctx(), &snap.id, Some(p)).await.unwrap();
    assert_eq!(r.manifest.image.as_deref(), Some(public.as_str()));
    let mut p = manifest();
    p.image = Some(public.clone());
    let r = m.create_from_template(&ctx(), "t", Some(p)).await.unwrap();
    assert_eq!(r.manifest.image.as_deref(), Some(public.as_str()));

    // The other tenant uses its own image; it cannot use mine.
    let mut o = manifest();
    o.image = Some(theirs.clone());
    m.create(&other_tenant(), o).await.unwrap();
    let mut o = manifest();
    o.image = Some(mine.clone());
    assert_eq!(
        m.create(&other_tenant(), o).await.unwrap_err().code,
        ErrorCode::InvalidManifest
    );

    // The snapshot's own image needs no name: restore and fork keep it.
    images.delete(&ctx().tenant, "mine:1").await.unwrap();
    let r = m.restore(&ctx(), &snap.id, None).await.unwrap();
    assert_eq!(r.manifest.image.as_deref(), Some(mine.as_str()));
    let (_, kids) = m.fork(&ctx(), &src.id, 1).await.unwrap();
    assert_eq!(kids[0].manifest.image.as_deref(), Some(mine.as_str()));
}
