//! The messages of envd's `process.Process` service (proto3 JSON), written
//! from its `.proto` description, and their translation to and from
//! stasis sessions (pure functions, tested here).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use stasis_core::{PtySize, SessionInfo, SessionOutput, SessionSpec};

use super::connect::{Code, RpcError, RpcResult};
use super::pbjson;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ProcessConfig {
    pub cmd: String,
    pub args: Vec<String>,
    pub envs: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Size {
    #[serde(deserialize_with = "pbjson::de_u32")]
    pub cols: u32,
    #[serde(deserialize_with = "pbjson::de_u32")]
    pub rows: u32,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Pty {
    pub size: Option<Size>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StartRequest {
    pub process: Option<ProcessConfig>,
    pub pty: Option<Pty>,
    pub tag: Option<String>,
    pub stdin: Option<bool>,
}

/// Which process a call is about: a pid or a tag (a oneof).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Selector {
    #[serde(deserialize_with = "pbjson::de_u32_opt")]
    pub pid: Option<u32>,
    pub tag: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ConnectRequest {
    pub process: Option<Selector>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct UpdateRequest {
    pub process: Option<Selector>,
    pub pty: Option<Pty>,
}

/// Input for a process (a oneof: stdin or the terminal).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ProcessInput {
    #[serde(deserialize_with = "pbjson::b64_opt::deserialize")]
    pub stdin: Option<Vec<u8>>,
    #[serde(deserialize_with = "pbjson::b64_opt::deserialize")]
    pub pty: Option<Vec<u8>>,
}

impl ProcessInput {
    pub fn bytes(self) -> Vec<u8> {
        self.stdin.or(self.pty).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SendInputRequest {
    pub process: Option<Selector>,
    pub input: Option<ProcessInput>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StreamStart {
    pub process: Option<Selector>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StreamData {
    pub input: Option<ProcessInput>,
}

/// One message of `StreamInput` (a oneof: start, data or keepalive).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StreamInputRequest {
    pub start: Option<StreamStart>,
    pub data: Option<StreamData>,
    pub keepalive: Option<serde_json::Value>,
}

/// `process.Signal`.
pub const SIGNALS: &[(&str, i32)] = &[
    ("SIGNAL_UNSPECIFIED", 0),
    ("SIGNAL_SIGTERM", 15),
    ("SIGNAL_SIGKILL", 9),
];

fn de_signal<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    pbjson::de_enum(d, SIGNALS)
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SendSignalRequest {
    pub process: Option<Selector>,
    #[serde(deserialize_with = "de_signal")]
    pub signal: i32,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SelectorOnly {
    pub process: Option<Selector>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo {
    pub config: ProcessConfig,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ListResponse {
    pub processes: Vec<ProcessInfo>,
}

/// An empty message (most responses).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Empty {}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum Output {
    Stdout(#[serde(with = "pbjson::b64")] Vec<u8>),
    Stderr(#[serde(with = "pbjson::b64")] Vec<u8>),
    Pty(#[serde(with = "pbjson::b64")] Vec<u8>),
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct End {
    pub exit_code: i32,
    pub exited: bool,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum Event {
    Start { pid: u32 },
    Data(Output),
    End(End),
    Keepalive {},
}

/// `StartResponse` and `ConnectResponse`: one event.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EventResponse {
    pub event: Event,
}

impl From<Event> for EventResponse {
    fn from(event: Event) -> Self {
        EventResponse { event }
    }
}

/// The pid a session is known by: a number derived from its id, so any
/// node finds the session again from the pid alone (sessions outlive a
/// pause, a resume and the daemon; a table kept here would not). It is
/// not a process id inside the sandbox.
pub fn pid_of(session: &str) -> u32 {
    let h = Sha256::digest(session.as_bytes());
    let n = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) & 0x3fff_ffff;
    n.max(1)
}

/// The user a call runs as, from envd's `Authorization: Basic <user:>`:
/// E2B's `root` is root; E2B's default `user` (and no user) is the
/// sandbox's own default user (its manifest's `user`, else root); any other
/// name is looked up in the sandbox's `/etc/passwd`.
pub fn user_of(basic: Option<&str>) -> RpcResult<Option<String>> {
    let Some(v) = basic else { return Ok(None) };
    let (scheme, cred) = v.trim().split_once(' ').unwrap_or((v, ""));
    if !scheme.eq_ignore_ascii_case("basic") {
        return Ok(None);
    }
    let raw = pbjson::b64::decode(cred.trim())
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("Authorization: {e}")))?;
    let text = String::from_utf8(raw)
        .map_err(|_| RpcError::new(Code::InvalidArgument, "Authorization: not UTF-8"))?;
    let name = text.split(':').next().unwrap_or("").trim();
    Ok(match name {
        "" | "user" => None,
        other => Some(other.to_string()),
    })
}

/// The session that runs a `Start`.
pub fn spec_of(req: StartRequest, user: Option<String>) -> RpcResult<SessionSpec> {
    let p = req.process.unwrap_or_default();
    if p.cmd.is_empty() {
        return Err(RpcError::new(Code::InvalidArgument, "process.cmd is empty"));
    }
    let mut argv = vec![p.cmd];
    argv.extend(p.args);
    let pty = req.pty.map(|t| {
        let s = t.size.unwrap_or(Size { cols: 80, rows: 24 });
        let side = |n: u32| u16::try_from(n).unwrap_or(u16::MAX);
        PtySize {
            cols: side(s.cols),
            rows: side(s.rows),
        }
    });
    Ok(SessionSpec {
        argv,
        env: p.envs,
        cwd: p.cwd.filter(|c| !c.is_empty()),
        pty,
        user,
    })
}

/// What `List` tells of a running session.
pub fn info_of(s: &SessionInfo, tag: Option<String>) -> ProcessInfo {
    let mut argv = s.argv.iter().cloned();
    ProcessInfo {
        config: ProcessConfig {
            cmd: argv.next().unwrap_or_default(),
            args: argv.collect(),
            envs: BTreeMap::new(),
            cwd: None,
        },
        pid: pid_of(&s.id),
        tag,
    }
}

/// The events of one read of a session's output: its bytes in the order
/// produced (on the terminal for a PTY session; else stdout and stderr
/// apart, by the stderr ranges the session reports), then the end when it
/// exited.
pub fn events_of(out: &SessionOutput, pty: bool) -> Vec<Event> {
    let mut ev = Vec::new();
    if pty {
        if !out.data.is_empty() {
            ev.push(Event::Data(Output::Pty(out.data.clone())));
        }
    } else {
        let end = out.offset + out.data.len() as u64;
        let bytes = |a: u64, b: u64| {
            out.data[(a - out.offset) as usize..(b - out.offset) as usize].to_vec()
        };
        let mut at = out.offset;
        for r in &out.stderr {
            let (a, b) = (r[0].clamp(at, end), r[1].clamp(at, end));
            if a > at {
                ev.push(Event::Data(Output::Stdout(bytes(at, a))));
            }
            if b > a {
                ev.push(Event::Data(Output::Stderr(bytes(a, b))));
            }
            at = at.max(b);
        }
        if end > at {
            ev.push(Event::Data(Output::Stdout(bytes(at, end))));
        }
    }
    if !out.running {
        ev.push(Event::End(end_of(out.exit_code)));
    }
    ev
}

/// The end of a session: its exit status, or killed (by a signal).
pub fn end_of(exit_code: Option<i32>) -> End {
    match exit_code {
        Some(c) => End {
            exit_code: c,
            exited: true,
            status: format!("exit status {c}"),
            error: None,
        },
        None => End {
            exit_code: -1,
            exited: false,
            status: "signal: killed".into(),
            error: Some("signal: killed".into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keeps_stdout_and_stderr_apart_in_order() {
        let out = SessionOutput {
            offset: 10,
            data: b"outERRmoreE2".to_vec(),
            next_offset: 22,
            running: false,
            exit_code: Some(3),
            stderr: vec![[13, 16], [20, 22]],
        };
        let ev = events_of(&out, false);
        assert_eq!(
            ev,
            vec![
                Event::Data(Output::Stdout(b"out".to_vec())),
                Event::Data(Output::Stderr(b"ERR".to_vec())),
                Event::Data(Output::Stdout(b"more".to_vec())),
                Event::Data(Output::Stderr(b"E2".to_vec())),
                Event::End(end_of(Some(3))),
            ]
        );
        // A terminal is one stream, whatever ranges say.
        assert_eq!(
            events_of(&out, true)[0],
            Event::Data(Output::Pty(out.data.clone()))
        );
        // No ranges: all stdout.
        let plain = SessionOutput {
            stderr: vec![],
            running: true,
            ..out
        };
        assert_eq!(
            events_of(&plain, false),
            vec![Event::Data(Output::Stdout(plain.data.clone()))]
        );
    }

    #[test]
    fn start_requests_become_sessions() {
        let req: StartRequest = serde_json::from_str(
            r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"FOO":"bar"},"cwd":"/tmp"},"stdin":false}"#,
        )
        .unwrap();
        let s = spec_of(req, Some("root".into())).unwrap();
        assert_eq!(s.argv, ["/bin/bash", "-l", "-c", "echo hi"]);
        assert_eq!(s.env.get("FOO").map(String::as_str), Some("bar"));
        assert_eq!(s.cwd.as_deref(), Some("/tmp"));
        assert_eq!(s.user.as_deref(), Some("root"));
        assert!(s.pty.is_none());
        let pty: StartRequest = serde_json::from_str(
            r#"{"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":"120","rows":40}}}"#,
        )
        .unwrap();
        let s = spec_of(pty, None).unwrap();
        assert_eq!(
            s.pty,
            Some(PtySize {
                cols: 120,
                rows: 40
            })
        );
        let empty: StartRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(
            spec_of(empty, None).unwrap_err().code,
            Code::InvalidArgument
        );
    }

    #[test]
    fn pids_are_stable_small_and_distinct() {
        let a = pid_of("sess-1-2-3");
        assert_eq!(a, pid_of("sess-1-2-3"));
        assert_ne!(a, pid_of("sess-1-2-4"));
        assert!((1..0x4000_0000).contains(&a));
    }

    #[test]
    fn users_from_basic_authorization() {
        use base64::Engine;
        let enc = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert_eq!(user_of(None).unwrap(), None);
        assert_eq!(user_of(Some(&enc("user:"))).unwrap(), None);
        assert_eq!(
            user_of(Some(&enc("root:"))).unwrap().as_deref(),
            Some("root")
        );
        assert_eq!(
            user_of(Some(&enc("alice:"))).unwrap().as_deref(),
            Some("alice")
        );
        assert!(user_of(Some("Basic !!!")).is_err());
    }

    #[test]
    fn events_are_the_proto3_json_the_sdks_read() {
        let start = serde_json::to_value(EventResponse::from(Event::Start { pid: 5 })).unwrap();
        assert_eq!(start, serde_json::json!({"event": {"start": {"pid": 5}}}));
        let out = SessionOutput {
            offset: 0,
            data: b"hi\n".to_vec(),
            next_offset: 3,
            running: false,
            exit_code: Some(2),
            stderr: vec![],
        };
        let ev: Vec<_> = events_of(&out, false)
            .into_iter()
            .map(|e| serde_json::to_value(EventResponse::from(e)).unwrap())
            .collect();
        assert_eq!(
            ev[0],
            serde_json::json!({"event": {"data": {"stdout": "aGkK"}}})
        );
        assert_eq!(
            ev[1],
            serde_json::json!({"event": {"end": {"exitCode": 2, "exited": true, "status": "exit status 2"}}})
        );
        let pty = events_of(&out, true);
        assert!(matches!(&pty[0], Event::Data(Output::Pty(d)) if d == b"hi\n"));
        let ka = serde_json::to_value(EventResponse::from(Event::Keepalive {})).unwrap();
        assert_eq!(ka, serde_json::json!({"event": {"keepalive": {}}}));
        let killed = end_of(None);
        assert_eq!((killed.exit_code, killed.exited), (-1, false));
    }

    #[test]
    fn selectors_signals_and_input() {
        let r: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"pid":42},"signal":"SIGNAL_SIGKILL"}"#).unwrap();
        assert_eq!(r.process.unwrap().pid, Some(42));
        assert_eq!(r.signal, 9);
        let r: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"tag":"t"},"signal":15}"#).unwrap();
        assert_eq!(r.process.unwrap().tag.as_deref(), Some("t"));
        assert!(serde_json::from_str::<SendSignalRequest>(r#"{"signal":"SIGHUP"}"#).is_err());
        let i: SendInputRequest =
            serde_json::from_str(r#"{"process":{"pid":1},"input":{"stdin":"aGk="}}"#).unwrap();
        assert_eq!(i.input.unwrap().bytes(), b"hi");
        let s: StreamInputRequest = serde_json::from_str(r#"{"keepalive":{}}"#).unwrap();
        assert!(s.keepalive.is_some() && s.start.is_none());
    }

    #[test]
    fn list_shows_the_command_line() {
        let s = SessionInfo {
            id: "sess-a".into(),
            argv: vec!["sleep".into(), "10".into()],
            running: true,
            exit_code: None,
            started_at_ms: 0,
            output_end: 0,
            pty: None,
        };
        let i = info_of(&s, Some("t".into()));
        assert_eq!(i.config.cmd, "sleep");
        assert_eq!(i.config.args, ["10"]);
        assert_eq!(i.pid, pid_of("sess-a"));
        let v = serde_json::to_value(&i).unwrap();
        assert_eq!(v["config"]["cmd"], "sleep");
        assert_eq!(v["tag"], "t");
    }
}
