//! What envd keeps between calls that stasis's control plane has no place
//! for: the tags processes were started with, and the watchers of envd's
//! polling watch API (`CreateWatcher` / `GetWatcherEvents` /
//! `RemoveWatcher`). Both live in this daemon's memory: a tag or a watcher
//! is lost when the daemon restarts (a watch also ends when its sandbox
//! pauses, as every stasis watch does).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use stasis_core::{Error, ErrorCode, Result, SandboxId, TenantId};

use super::fs_msg::FsEvent;

/// Watchers per sandbox, and events a watcher holds between two polls.
pub const MAX_WATCHERS: usize = 64;
pub const MAX_BUFFERED: usize = 10_000;

/// Events gathered for one watcher.
#[derive(Default)]
pub struct Buffer {
    pub events: Vec<FsEvent>,
    /// Events dropped because nobody polled.
    pub dropped: u64,
}

impl Buffer {
    pub fn push(&mut self, ev: FsEvent) {
        if self.events.len() < MAX_BUFFERED {
            self.events.push(ev);
        } else {
            self.dropped += 1;
        }
    }
}

struct Watcher {
    sandbox: SandboxId,
    tenant: TenantId,
    buf: Arc<Mutex<Buffer>>,
    task: tokio::task::AbortHandle,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
pub struct Registry {
    tags: Mutex<HashMap<(SandboxId, String), String>>,
    watchers: Mutex<HashMap<String, Watcher>>,
}

impl Registry {
    /// Remember that `session` was started with `tag` (a later start with
    /// the same tag takes it over, as the newest process of that name).
    pub fn tag(&self, id: &SandboxId, tag: &str, session: &str) {
        self.tags
            .lock()
            .expect("tags")
            .insert((id.clone(), tag.to_string()), session.to_string());
    }

    pub fn session_of_tag(&self, id: &SandboxId, tag: &str) -> Option<String> {
        self.tags
            .lock()
            .expect("tags")
            .get(&(id.clone(), tag.to_string()))
            .cloned()
    }

    pub fn tag_of_session(&self, id: &SandboxId, session: &str) -> Option<String> {
        self.tags
            .lock()
            .expect("tags")
            .iter()
            .find(|((sb, _), s)| sb == id && s.as_str() == session)
            .map(|((_, t), _)| t.clone())
    }

    /// Forget the tags of sessions no longer running (`alive` holds the
    /// running sessions of sandbox `id`).
    pub fn prune_tags(&self, id: &SandboxId, alive: &[String]) {
        self.tags
            .lock()
            .expect("tags")
            .retain(|(sb, _), s| sb != id || alive.contains(s));
    }

    /// Keep a watcher whose events `task` gathers into `buf`.
    pub fn add_watcher(
        &self,
        id: &SandboxId,
        tenant: &TenantId,
        buf: Arc<Mutex<Buffer>>,
        task: tokio::task::AbortHandle,
    ) -> Result<String> {
        let mut w = self.watchers.lock().expect("watchers");
        if w.values().filter(|x| &x.sandbox == id).count() >= MAX_WATCHERS {
            task.abort();
            return Err(Error::new(
                ErrorCode::RateLimited,
                format!("a sandbox has at most {MAX_WATCHERS} watchers; remove one first"),
            ));
        }
        let wid = uuid::Uuid::new_v4().simple().to_string();
        w.insert(
            wid.clone(),
            Watcher {
                sandbox: id.clone(),
                tenant: tenant.clone(),
                buf,
                task,
            },
        );
        Ok(wid)
    }

    /// The events gathered since the last call (a watcher of another
    /// sandbox or tenant is not found).
    pub fn take_events(
        &self,
        id: &SandboxId,
        tenant: &TenantId,
        wid: &str,
    ) -> Result<Vec<FsEvent>> {
        let w = self.watchers.lock().expect("watchers");
        let x = w
            .get(wid)
            .filter(|x| &x.sandbox == id && &x.tenant == tenant)
            .ok_or_else(|| Error::not_found(format!("watcher {wid}")))?;
        let mut b = x.buf.lock().expect("buffer");
        Ok(std::mem::take(&mut b.events))
    }

    pub fn remove_watcher(&self, id: &SandboxId, tenant: &TenantId, wid: &str) -> Result<()> {
        let mut w = self.watchers.lock().expect("watchers");
        match w.get(wid) {
            Some(x) if &x.sandbox == id && &x.tenant == tenant => {
                w.remove(wid);
                Ok(())
            }
            _ => Err(Error::not_found(format!("watcher {wid}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(n: &str) -> FsEvent {
        FsEvent {
            name: n.into(),
            kind: "EVENT_TYPE_CREATE",
            entry: None,
        }
    }

    #[tokio::test]
    async fn watchers_are_per_sandbox_and_tenant_and_drain_on_poll() {
        let r = Registry::default();
        let a = SandboxId::parse("sb-a").unwrap();
        let b = SandboxId::parse("sb-b").unwrap();
        let t = TenantId::parse("acme").unwrap();
        let u = TenantId::parse("other").unwrap();
        let buf = Arc::new(Mutex::new(Buffer::default()));
        let task = tokio::spawn(std::future::pending::<()>());
        let wid = r
            .add_watcher(&a, &t, buf.clone(), task.abort_handle())
            .unwrap();
        buf.lock().unwrap().push(ev("x"));
        assert!(r.take_events(&b, &t, &wid).is_err());
        assert!(r.take_events(&a, &u, &wid).is_err());
        assert_eq!(r.take_events(&a, &t, &wid).unwrap(), vec![ev("x")]);
        assert!(r.take_events(&a, &t, &wid).unwrap().is_empty());
        assert!(r.remove_watcher(&b, &t, &wid).is_err());
        r.remove_watcher(&a, &t, &wid).unwrap();
        assert!(r.take_events(&a, &t, &wid).is_err());
        // Removing the watcher stopped its task.
        let e = task.await.unwrap_err();
        assert!(e.is_cancelled());
    }

    #[test]
    fn buffers_are_bounded() {
        let mut b = Buffer::default();
        for i in 0..MAX_BUFFERED + 3 {
            b.push(ev(&i.to_string()));
        }
        assert_eq!((b.events.len(), b.dropped), (MAX_BUFFERED, 3));
    }

    #[test]
    fn tags_name_running_sessions() {
        let r = Registry::default();
        let a = SandboxId::parse("sb-a").unwrap();
        r.tag(&a, "web", "sess-1");
        assert_eq!(r.session_of_tag(&a, "web").as_deref(), Some("sess-1"));
        assert_eq!(r.tag_of_session(&a, "sess-1").as_deref(), Some("web"));
        r.prune_tags(&a, &[]);
        assert_eq!(r.session_of_tag(&a, "web"), None);
    }
}
