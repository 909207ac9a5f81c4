"""Python client of the stasis HTTP API.

Sync: :class:`Client`, :class:`Sandbox`. Async: :mod:`stasis_client.aio`.
OpenAI Agents SDK sandbox provider: :mod:`stasis_client.agents_sdk`
(``pip install 'stasis-client[agents]'``).
"""

from . import errors
from .client import Client, ExecStream, Files, Pty, Run, Runs, Sandbox, Session, Templates
from .errors import (
    BackendError,
    Busy,
    CodeError,
    ConnectionFailed,
    IncompatibleSnapshot,
    IntegrityError,
    InternalError,
    InvalidArgument,
    InvalidManifest,
    InvalidState,
    NotFound,
    Overloaded,
    Forbidden,
    PortUnreachable,
    PayloadTooLarge,
    RateLimited,
    StasisError,
    Timeout,
    Unauthorized,
    Unsupported,
)
from .models import (
    CallOutcome,
    ExecResult,
    FileEntry,
    OutputChunk,
    PortUrl,
    ResumeReport,
    SandboxInfo,
    SessionInfo,
    SessionOutput,
    SnapshotInfo,
    TemplateInfo,
)

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "Busy",
    "CallOutcome",
    "Client",
    "CodeError",
    "ConnectionFailed",
    "ExecResult",
    "ExecStream",
    "FileEntry",
    "Forbidden",
    "Files",
    "IntegrityError",
    "InternalError",
    "InvalidArgument",
    "InvalidManifest",
    "InvalidState",
    "NotFound",
    "OutputChunk",
    "Overloaded",
    "IncompatibleSnapshot",
    "PayloadTooLarge",
    "PortUnreachable",
    "PortUrl",
    "RateLimited",
    "ResumeReport",
    "Run",
    "Runs",
    "Sandbox",
    "SandboxInfo",
    "Pty",
    "Session",
    "SessionInfo",
    "SessionOutput",
    "SnapshotInfo",
    "StasisError",
    "TemplateInfo",
    "Templates",
    "Timeout",
    "Unauthorized",
    "Unsupported",
    "errors",
]
