//! `autostart`: the default command starts as a session at create (what a
//! container does with its CMD: the code interpreter's server), and a create
//! whose command cannot start leaves nothing behind.

use super::harness::*;
use stasis_core::{ErrorCode, SandboxState};

#[tokio::test]
async fn autostart_runs_the_default_command_as_a_session_at_create() {
    let env = Env::process();
    let m = env.manager().await;
    let mut man = manifest();
    man.command = Some(vec!["cat".into()]);
    man.autostart = true;
    let rec = m.create(&ctx(), man.clone()).await.unwrap();
    assert_eq!(rec.state, SandboxState::Running);
    let sessions = m.session_list(&ctx(), &rec.id).await.unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0].argv, vec!["cat".to_string()]);
    // It keeps running across a pause (memory kept) and is not started twice.
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    m.resume(&ctx(), &rec.id).await.unwrap();
    assert_eq!(m.session_list(&ctx(), &rec.id).await.unwrap().len(), 1);

    // Without autostart the command only waits for a session to ask for it.
    man.autostart = false;
    let plain = m.create(&ctx(), man).await.unwrap();
    assert!(m.session_list(&ctx(), &plain.id).await.unwrap().is_empty());
}

#[tokio::test]
async fn autostart_without_a_command_is_refused_before_anything_exists() {
    let env = Env::process();
    let m = env.manager().await;
    let mut man = manifest();
    man.autostart = true;
    let e = m.create(&ctx(), man).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidManifest);
    assert_eq!(e.field.as_deref(), Some("autostart"));
    assert!(env.fake.held().is_empty());
    assert!(m.list(&ctx(), None).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_create_whose_autostart_fails_leaves_nothing() {
    let env = Env::process();
    let m = env.manager().await;
    env.fake.fail_at("session_start", ErrorCode::BackendError);
    let mut man = manifest();
    man.command = Some(vec!["cat".into()]);
    man.autostart = true;
    let e = m.create(&ctx(), man).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BackendError);
    assert!(env.fake.held().is_empty(), "{:?}", env.fake.held());
    let left = m.list(&ctx(), None).await.unwrap();
    assert!(
        left.iter().all(|r| r.state == SandboxState::Destroyed),
        "{left:?}"
    );
}
