//! Image tenancy on every path a manifest enters: another tenant's image,
//! by name or id, is refused (and audited) at create, at restore with a
//! manifest and at create from a template; the tenant's own and the public
//! images are pinned to their ids; a restore without a manifest keeps the
//! snapshot's image even after its name is gone.

use super::harness::*;
use stasis_control::images::Images;
use stasis_control::{Ctx, Manager};
use stasis_core::{ErrorCode, TenantId};
use stasis_image::layer::ApplyOptions;
use stasis_image::store::Owner;

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

/// An image's USER and ENTRYPOINT + CMD become the sandbox's `user` and
/// `command` unless its manifest sets them; every exec and session runs as
/// that user unless it names its own; a session without a command runs the
/// default one.
#[tokio::test]
async fn an_images_user_and_command_are_the_sandboxs_defaults() {
    use stasis_core::SessionSpec;
    use stasis_image::store::ImageConfig;
    let env = Env::process();
    let m = env.manager().await;
    let images = Images::open(&env.root.join("images-store")).unwrap();
    m.set_images(images.clone());
    let dir = env.root.join("dir-app");
    std::fs::create_dir_all(&dir).unwrap();
    let config = ImageConfig {
        user: "app".into(),
        entrypoint: Some(vec!["whoami".into()]),
        ..Default::default()
    };
    let owner = Owner::Tenant(ctx().tenant.to_string());
    images
        .store()
        .commit(
            &owner,
            "app",
            "1",
            Some(&dir),
            vec![],
            config,
            vec![],
            &ApplyOptions::default(),
        )
        .unwrap();
    let mut man = manifest();
    man.image = Some("app:1".into());
    let sb = m.create(&ctx(), man.clone()).await.unwrap();
    assert_eq!(sb.manifest.user.as_deref(), Some("app"));
    assert_eq!(sb.manifest.command, Some(vec!["whoami".to_string()]));
    assert_eq!(run(&m, &sb.id, &["whoami"]).await, "app\n");
    // A request's own user wins.
    let mut r = req(&["whoami"]);
    r.user = Some("1000:1000".into());
    let out = m.exec(&ctx(), &sb.id, r, None).await.unwrap();
    assert_eq!(out.stdout, b"1000:1000\n");
    // A malformed one is refused before anything runs.
    let mut r = req(&["whoami"]);
    r.user = Some("a:b:c".into());
    let e = m.exec(&ctx(), &sb.id, r, None).await.unwrap_err();
    assert_eq!(
        (e.code, e.field.as_deref()),
        (ErrorCode::InvalidArgument, Some("user"))
    );
    // A session without a command runs the image's ENTRYPOINT + CMD.
    let spec = SessionSpec {
        argv: vec![],
        env: Default::default(),
        cwd: None,
        pty: None,
        user: None,
    };
    let s = m.session_start(&ctx(), &sb.id, spec.clone()).await.unwrap();
    assert_eq!(s.argv, vec!["whoami".to_string()]);
    let out = m
        .session_read(&ctx(), &sb.id, &s.id, 0, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(out.data, b"app\n");

    // The manifest overrides both; a sandbox with no command refuses an
    // empty session naming argv.
    man.user = Some("0".into());
    man.command = None;
    let plain = m.create(&ctx(), manifest()).await.unwrap();
    let e = m
        .session_start(&ctx(), &plain.id, spec.clone())
        .await
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("argv"), "{e:?}");
    assert!(e.message.contains("no default command"), "{e:?}");
    let root = m.create(&ctx(), man).await.unwrap();
    assert_eq!(root.manifest.user.as_deref(), Some("0"));
    assert_eq!(run(&m, &root.id, &["whoami"]).await, "0\n");
}
