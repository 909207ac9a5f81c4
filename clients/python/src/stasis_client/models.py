"""Typed views of the API's answers. Each keeps the decoded JSON in ``raw``."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Optional


def _b64(s: Any) -> bytes:
    return base64.b64decode(s) if isinstance(s, str) and s else b""


@dataclass
class SandboxInfo:
    id: str
    state: str
    backend: str
    manifest: dict[str, Any]
    manifest_digest: str
    created_at_ms: int
    running_ms: int
    reason: Optional[str] = None
    paused_at_ms: Optional[int] = None
    expires_at_ms: Optional[int] = None
    pause_kind: Optional[str] = None
    pause_snapshot: Optional[str] = None
    source_snapshot: Optional[str] = None
    timing: Optional[dict[str, Any]] = None
    labels: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SandboxInfo":
        return cls(
            id=d["id"],
            state=d["state"],
            backend=d["backend"],
            manifest=d.get("manifest") or {},
            manifest_digest=d.get("manifest_digest", ""),
            created_at_ms=d.get("created_at_ms", 0),
            running_ms=d.get("running_ms", 0),
            reason=d.get("reason"),
            paused_at_ms=d.get("paused_at_ms"),
            expires_at_ms=d.get("expires_at_ms"),
            pause_kind=d.get("pause_kind"),
            pause_snapshot=d.get("pause_snapshot"),
            source_snapshot=d.get("source_snapshot"),
            timing=d.get("timing"),
            labels=dict(d.get("labels") or {}),
            raw=d,
        )


@dataclass
class ExecResult:
    """The result of a command. ``exit_code`` is None when killed by a signal or timed out."""

    exit_code: Optional[int]
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    truncated: bool = False
    duration_ms: int = 0
    signal: Optional[int] = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ExecResult":
        return cls(
            exit_code=d.get("exit_code"),
            stdout=_b64(d.get("stdout_b64")),
            stderr=_b64(d.get("stderr_b64")),
            timed_out=bool(d.get("timed_out")),
            truncated=bool(d.get("truncated")),
            duration_ms=int(d.get("duration_ms") or 0),
            signal=d.get("signal"),
        )


@dataclass
class OutputChunk:
    """A piece of a streaming exec's output, as it arrived."""

    stream: str  # "stdout" | "stderr"
    data: bytes


@dataclass
class FileEntry:
    name: str
    kind: str  # file | dir | symlink | other
    size: int
    mode: int
    mtime: int

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FileEntry":
        return cls(
            name=d["name"],
            kind=d["kind"],
            size=int(d.get("size", 0)),
            mode=int(d.get("mode", 0)),
            mtime=int(d.get("mtime", 0)),
        )


@dataclass
class FileStat:
    """One entry itself (a symlink is not followed; ``symlink_target`` is its text)."""

    path: str
    kind: str  # file | dir | symlink | other
    size: int
    mode: int
    mtime: int
    symlink_target: Optional[str] = None

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"

    @property
    def is_file(self) -> bool:
        return self.kind == "file"

    @property
    def is_symlink(self) -> bool:
        return self.kind == "symlink"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FileStat":
        return cls(
            path=d["path"],
            kind=d["kind"],
            size=int(d.get("size", 0)),
            mode=int(d.get("mode", 0)),
            mtime=int(d.get("mtime", 0)),
            symlink_target=d.get("symlink_target"),
        )


@dataclass
class FileEvent:
    """A change under a watched directory; ``path`` (and ``to`` for a rename)
    relative to it. ``kind``: created | modified | removed | renamed."""

    kind: str
    path: str
    to: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "FileEvent":
        return cls(kind=d["kind"], path=d["path"], to=d.get("to"))


@dataclass
class SandboxPage:
    """One page of ``Sandbox.list``; ``next_cursor`` is None on the last page."""

    sandboxes: list[SandboxInfo]
    next_cursor: Optional[str] = None


@dataclass
class SessionInfo:
    id: str
    argv: list[str]
    running: bool
    started_at_ms: int
    output_end: int
    exit_code: Optional[int] = None
    #: ``(cols, rows)`` of a session started on a terminal.
    pty: Optional[tuple[int, int]] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SessionInfo":
        p = d.get("pty")
        return cls(
            id=d["id"],
            argv=list(d.get("argv") or []),
            running=bool(d.get("running")),
            started_at_ms=int(d.get("started_at_ms", 0)),
            output_end=int(d.get("output_end", 0)),
            exit_code=d.get("exit_code"),
            pty=(int(p["cols"]), int(p["rows"])) if p else None,
        )


@dataclass
class SessionOutput:
    """A window of a session's output: ``data`` is stdout and stderr
    combined (in the order the sandbox read them), ``stdout`` / ``stderr``
    the same window's bytes split by stream (a terminal's output is all
    stdout; a daemon from before the split reports everything as stdout)."""

    offset: int
    data: bytes
    next_offset: int
    running: bool
    exit_code: Optional[int] = None
    stdout: bytes = b""
    stderr: bytes = b""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SessionOutput":
        data = _b64(d.get("data_b64"))
        return cls(
            offset=int(d["offset"]),
            data=data,
            next_offset=int(d["next_offset"]),
            running=bool(d.get("running")),
            exit_code=d.get("exit_code"),
            stdout=_b64(d["stdout_b64"]) if "stdout_b64" in d else data,
            stderr=_b64(d.get("stderr_b64")),
        )


@dataclass
class PortUrl:
    """A signed URL opening one port of one sandbox, without a token, until it
    expires or is revoked."""

    id: str
    url: str
    path: str
    port: int
    expires_at_ms: int

    @classmethod
    def from_json(cls, d: dict[str, Any], base_url: str) -> "PortUrl":
        path = str(d["path"])
        return cls(
            id=str(d["id"]),
            url=base_url.rstrip("/") + path,
            path=path,
            port=int(d["port"]),
            expires_at_ms=int(d["expires_at_ms"]),
        )


@dataclass
class SnapshotInfo:
    id: str
    kind: str
    backend: str
    source_sandbox: Optional[str]
    manifest_digest: str
    created_at_ms: int
    expires_at_ms: Optional[int]
    raw_bytes: int
    stored_bytes: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SnapshotInfo":
        return cls(
            id=d["id"],
            kind=str(d.get("kind", "")),
            backend=str(d.get("backend", "")),
            source_sandbox=d.get("source_sandbox"),
            manifest_digest=d.get("manifest_digest", ""),
            created_at_ms=int(d.get("created_at_ms", 0)),
            expires_at_ms=d.get("expires_at_ms"),
            raw_bytes=int(d.get("raw_bytes", 0)),
            stored_bytes=int(d.get("stored_bytes", 0)),
            raw=d,
        )


@dataclass
class TemplateInfo:
    """One version of a template (``reference`` is ``name:version``)."""

    name: str
    version: int
    reference: str
    snapshot: str
    backend: str
    manifest_digest: str
    source_sandbox: Optional[str]
    created_at_ms: int
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TemplateInfo":
        return cls(
            name=d["name"],
            version=int(d["version"]),
            reference=d.get("reference", f"{d['name']}:{d['version']}"),
            snapshot=d.get("snapshot", ""),
            backend=str(d.get("backend", "")),
            manifest_digest=d.get("manifest_digest", ""),
            source_sandbox=d.get("source_sandbox"),
            created_at_ms=int(d.get("created_at_ms", 0)),
            raw=d,
        )


@dataclass
class CallOutcome:
    """What a tool call request or an approval decision returns."""

    outcome: str  # succeeded | failed | awaiting_approval | rejected | outcome_unknown
    replayed: bool
    call: dict[str, Any]
    run: dict[str, Any]

    @property
    def call_id(self) -> str:
        return str(self.call["id"])

    @property
    def result(self) -> Optional[dict[str, Any]]:
        return self.call.get("result")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CallOutcome":
        return cls(
            outcome=d["outcome"], replayed=bool(d["replayed"]), call=d["call"], run=d["run"]
        )


@dataclass
class ResumeReport:
    run: dict[str, Any]
    still_pending: list[str]
    decided_since: list[str]
    sandbox: Optional[dict[str, Any]]
    state: dict[str, Any]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ResumeReport":
        return cls(
            run=d["run"],
            still_pending=list(d.get("still_pending") or []),
            decided_since=list(d.get("decided_since") or []),
            sandbox=d.get("sandbox"),
            state=d["state"],
        )
