//! The port proxy as the E2B edge reaches it: a data-plane request for a
//! port other than envd's (`E2b-Sandbox-Port`) is relayed like any `/v1`
//! port request, on the daemon's origin (so confined like one).

use axum::extract::Request;

use super::ports::{relay, Dest};
use super::state::AppState;
use crate::manager::Ctx;
use stasis_core::SandboxId;
use stasis_e2b::envd::route::BoxResponse;

pub struct Forward(pub AppState);

impl stasis_e2b::envd::PortForward for Forward {
    fn forward(&self, ctx: Ctx, id: SandboxId, port: u16, req: Request) -> BoxResponse {
        let st = self.0.clone();
        Box::pin(async move {
            let path_and_query = req
                .uri()
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_else(|| "/".into());
            let d = Dest {
                id,
                port,
                prefix: String::new(),
                path_and_query,
                signed: false,
                daemon_origin: true,
            };
            relay(&st, &ctx, d, req).await
        })
    }
}
