//! Attaching to a terminal session through the manager (the loop the
//! WebSocket carries), on the fake backend: the replay offset, input and
//! resizes reaching the session, refused resizes reported without ending
//! the attachment, an idle attached terminal not keeping the sandbox awake
//! (the reaper pauses it and the client is detached with its offset),
//! reattaching (which resumes) from that offset, and the exit message.

use std::time::Duration;

use tokio::sync::mpsc;

use stasis_control::attach::{self, ClientMsg, ServerMsg};
use stasis_core::{ErrorCode, OnIdle, PtySize, SandboxState, SessionSpec};

use crate::harness::*;

const SIZE: PtySize = PtySize { cols: 80, rows: 24 };

async fn next(rx: &mut mpsc::Receiver<ServerMsg>) -> ServerMsg {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a message in time")
        .expect("the attachment is still open")
}

#[tokio::test]
async fn attach_replays_pumps_detaches_on_pause_and_reattaches() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running_with(&m, short_lived(OnIdle::Pause)).await;
    let id = rec.id.clone();
    let spec = SessionSpec {
        argv: vec!["cat".into()],
        env: Default::default(),
        cwd: None,
        pty: Some(SIZE),
        user: None,
    };
    let s = m.session_start(&ctx(), &id, spec).await.unwrap();
    m.session_write(&ctx(), &id, &s.id, b"before")
        .await
        .unwrap();

    // Unknown session or sandbox: not found before anything is attached.
    let e = attach::open(&m, &ctx(), &id, "s-999").await;
    assert_eq!(code(e), ErrorCode::NotFound);
    let other = stasis_core::SandboxId::generate();
    assert_eq!(
        code(attach::open(&m, &ctx(), &other, &s.id).await),
        ErrorCode::NotFound
    );

    let info = attach::open(&m, &ctx(), &id, &s.id).await.unwrap();
    assert_eq!(info.pty, Some(SIZE));
    let (in_tx, in_rx) = mpsc::channel(8);
    let (out_tx, mut out) = mpsc::channel(8);
    let pump = tokio::spawn(attach::pump(
        m.clone(),
        ctx(),
        id.clone(),
        s.id.clone(),
        2,
        in_rx,
        out_tx,
    ));
    // The replay starts where asked.
    assert_eq!(
        next(&mut out).await,
        ServerMsg::Attached {
            offset: 2,
            pty: Some(SIZE)
        }
    );
    assert_eq!(next(&mut out).await, ServerMsg::Output(b"fore".to_vec()));
    in_tx
        .send(ClientMsg::Input(b"-typed".to_vec()))
        .await
        .unwrap();
    assert_eq!(next(&mut out).await, ServerMsg::Output(b"-typed".to_vec()));
    let big = PtySize {
        cols: 120,
        rows: 40,
    };
    in_tx.send(ClientMsg::Resize(big)).await.unwrap();
    in_tx
        .send(ClientMsg::Resize(PtySize { cols: 0, rows: 0 }))
        .await
        .unwrap();
    match next(&mut out).await {
        ServerMsg::Error { code, .. } => assert_eq!(code, "invalid_argument"),
        other => panic!("{other:?}"),
    }
    let listed = m.session_list(&ctx(), &id).await.unwrap();
    assert_eq!(listed[0].pty, Some(big));

    // Attached but idle: reads are not activity, the reaper pauses it and
    // the client is detached with the offset it got to.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(id.clone(), "idle_paused")]);
    match next(&mut out).await {
        ServerMsg::Detached { offset, .. } => assert_eq!(offset, 12),
        other => panic!("{other:?}"),
    }
    pump.await.unwrap();
    assert_eq!(state(&m, &id).await, SandboxState::Paused);

    // Reattach: resumes the sandbox, replays nothing already seen.
    attach::open(&m, &ctx(), &id, &s.id).await.unwrap();
    assert_eq!(state(&m, &id).await, SandboxState::Running);
    let (in_tx, in_rx) = mpsc::channel(8);
    let (out_tx, mut out) = mpsc::channel(8);
    let pump = tokio::spawn(attach::pump(
        m.clone(),
        ctx(),
        id.clone(),
        s.id.clone(),
        12,
        in_rx,
        out_tx,
    ));
    assert_eq!(
        next(&mut out).await,
        ServerMsg::Attached {
            offset: 12,
            pty: Some(big)
        }
    );
    // Ctrl-D ends the fake's terminal `cat` with status 0.
    in_tx
        .send(ClientMsg::Input(b"!\x04".to_vec()))
        .await
        .unwrap();
    assert_eq!(next(&mut out).await, ServerMsg::Output(b"!".to_vec()));
    assert_eq!(next(&mut out).await, ServerMsg::Exit { code: Some(0) });
    pump.await.unwrap();
}

#[tokio::test]
async fn resize_needs_a_terminal_session() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    let spec = SessionSpec {
        argv: vec!["cat".into()],
        env: Default::default(),
        cwd: None,
        pty: None,
        user: None,
    };
    let s = m
        .session_start(&ctx(), &rec.id, spec.clone())
        .await
        .unwrap();
    let r = m.session_resize(&ctx(), &rec.id, &s.id, SIZE).await;
    assert_eq!(code(r), ErrorCode::InvalidState);
    let r = m.session_resize(&ctx(), &rec.id, "s-404", SIZE).await;
    assert_eq!(code(r), ErrorCode::NotFound);
    let r = m
        .session_resize(
            &ctx(),
            &rec.id,
            &s.id,
            PtySize {
                cols: 1001,
                rows: 1,
            },
        )
        .await;
    assert_eq!(code(r), ErrorCode::InvalidArgument);
    let mut bad = spec;
    bad.pty = Some(PtySize { cols: 0, rows: 24 });
    assert_eq!(
        code(m.session_start(&ctx(), &rec.id, bad).await),
        ErrorCode::InvalidArgument
    );
}
