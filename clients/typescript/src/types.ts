/**
 * Shapes of the API. Those the daemon's OpenAPI document describes come from
 * the generated `components` (src/generated/api.ts, regenerated and compared
 * by the contract test); the few answers it documents only in prose are
 * written out here from the server's types.
 */
import type { components } from './generated/api.js';

type Schemas = components['schemas'];

/** A sandbox as the daemon describes it (`GET /v1/sandboxes/{id}`). */
export type SandboxInfo = Schemas['Sandbox'];
export type ExecResponse = Schemas['ExecResponse'];
export type ExecStreamLine = Schemas['ExecStreamLine'];
export type ForkResponse = Schemas['ForkResponse'];
export type PortUrl = Schemas['PortUrl'];
export type TemplateInfo = Schemas['TemplateInfo'];
export type NetworkStatus = Schemas['NetworkStatus'];
export type ErrorBody = Schemas['ErrorBody'];

/** The sandbox states (`SandboxInfo.state`). */
export type SandboxState =
  | 'creating'
  | 'running'
  | 'pausing'
  | 'paused'
  | 'resuming'
  | 'destroying'
  | 'destroyed'
  | 'failed';

/** One directory entry (`GET .../files/list`). */
export interface FileEntry {
  name: string;
  kind: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: number;
  /** Seconds since the epoch. */
  mtime: number;
}

/** One entry itself (`GET .../files/stat`; a symlink is not followed). */
export interface FileStat {
  path: string;
  kind: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: number;
  mtime: number;
  symlink_target?: string;
}

/** A change under a watched directory (paths relative to it). */
export interface WatchEvent {
  kind: 'created' | 'modified' | 'removed' | 'renamed';
  path: string;
  to?: string;
}

export interface PtySize {
  cols: number;
  rows: number;
}

/** A long-running session (`POST .../sessions`). */
export interface SessionInfo {
  /** Stable across pause/resume. */
  id: string;
  argv: string[];
  running: boolean;
  exit_code?: number;
  started_at_ms: number;
  /** Total bytes of output so far (the next read offset at the tail). */
  output_end: number;
  pty?: PtySize;
}

export type SessionOutputResponse = Schemas['SessionOutputResponse'];

/** A snapshot (`GET /v1/snapshots/{id}`). */
export interface SnapshotInfo {
  id: string;
  kind: string;
  backend: string;
  source_sandbox: string | null;
  manifest: Record<string, unknown>;
  manifest_digest: string;
  created_by: string;
  created_at_ms: number;
  expires_at_ms: number | null;
  parent: string | null;
  raw_bytes: number;
  stored_bytes: number;
  new_stored_bytes: number;
  dedup_ratio: number;
  artifacts: unknown[];
}

export type CallState =
  | 'intent_recorded'
  | 'awaiting_approval'
  | 'succeeded'
  | 'failed'
  | 'rejected'
  | 'outcome_unknown';

export interface ToolCall {
  id: string;
  idempotency_key: string;
  spec: Record<string, unknown>;
  fingerprint: string;
  state: CallState;
  /** The recorded result (exec: exit code and output) once settled. */
  result?: Record<string, unknown>;
  error?: string;
  created_at_ms: number;
  updated_at_ms: number;
}

export interface Approval {
  call: string;
  requested_at_ms: number;
  decision?: { approved: boolean; by: string; at_ms: number; reason: string };
}

/** A run: its status, ordered steps, tool calls and approvals. */
export interface RunData {
  id: string;
  tenant: string;
  sandbox?: string;
  status: string;
  created_at_ms: number;
  updated_at_ms: number;
  steps: Array<Record<string, unknown>>;
  tool_calls: ToolCall[];
  approvals: Approval[];
}

/** What a tool call request or an approval decision answers. */
export interface CallOutcome {
  run: RunData;
  call: ToolCall;
  /** succeeded | failed | awaiting_approval | rejected | outcome_unknown | in_progress */
  outcome: string;
  /** True when nothing ran for this request: the recorded outcome was returned. */
  replayed: boolean;
}

/** The signed, versioned RunState document of a run. */
export type StateDocument = Record<string, unknown> & { format?: string };

export interface ResumeReport {
  run: RunData;
  still_pending: string[];
  decided_since: string[];
  sandbox?: Record<string, unknown>;
  state: StateDocument;
}
