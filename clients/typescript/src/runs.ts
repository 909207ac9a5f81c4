/** Runs: ordered steps, idempotent tool calls, approvals and the signed RunState document. */
import type { Http } from './http.js';
import { argvOf, type Command } from './sandbox.js';
import type { CallOutcome, ResumeReport, RunData, StateDocument } from './types.js';

export interface ToolCallOptions {
  /** Whether the call changes the world (recorded; an unknown outcome is never re-run). Default true. */
  sideEffecting?: boolean;
  /** Hold the call until approved (`Run.approve`); the request answers 202 `awaiting_approval`. */
  requiresApproval?: boolean;
  cwd?: string;
  timeoutMs?: number;
  /** For this exec only; names are recorded, values never. Refused with `requiresApproval`. */
  env?: Record<string, string>;
}

export class Runs {
  constructor(private readonly http: Http) {}

  /** A new run, bound to `sandbox` (the sandbox its tool calls run in). */
  async create(sandbox?: string): Promise<Run> {
    return new Run(this.http, await this.http.json<RunData>('runs.create', { json: sandbox ? { sandbox } : {} }));
  }

  async get(id: string): Promise<Run> {
    return new Run(this.http, await this.http.json<RunData>('runs.get', { ids: { id } }));
  }

  async list(): Promise<Array<Record<string, unknown>>> {
    return this.http.json('runs.list');
  }

  /**
   * Check a saved RunState document against the server (pending approvals,
   * the sandbox) and get a fresh one; with `sandbox`, the run moves there
   * (e.g. a sandbox restored from a snapshot).
   */
  async resume(document: StateDocument, opts: { sandbox?: string } = {}): Promise<ResumeReport> {
    const json = opts.sandbox ? { document, sandbox: opts.sandbox } : document;
    return this.http.json<ResumeReport>('runs.resume', { json });
  }
}

export class Run {
  constructor(
    private readonly http: Http,
    public data: RunData,
  ) {}

  get id(): string {
    return this.data.id;
  }
  get sandbox(): string | undefined {
    return this.data.sandbox;
  }

  async refresh(): Promise<this> {
    this.data = await this.http.json<RunData>('runs.get', { ids: { id: this.id } });
    return this;
  }

  /**
   * Run `cmd` once per `idempotencyKey`: the intent is recorded before it
   * runs and the result after; the same key again answers the recorded
   * outcome (`replayed: true`) and runs nothing.
   */
  async call(idempotencyKey: string, cmd: Command, opts: ToolCallOptions = {}): Promise<CallOutcome> {
    const body: Record<string, unknown> = {
      idempotency_key: idempotencyKey,
      kind: 'exec',
      argv: argvOf(cmd),
      side_effecting: opts.sideEffecting ?? true,
      requires_approval: opts.requiresApproval ?? false,
    };
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.timeoutMs !== undefined) body.timeout_ms = opts.timeoutMs;
    if (opts.env) body.env = opts.env;
    const o = await this.http.json<CallOutcome>('runs.call', {
      ids: { id: this.id },
      json: body,
      extraTimeoutMs: opts.timeoutMs ?? 60_000,
    });
    this.data = o.run;
    return o;
  }

  /** Approve a held call: it runs now (once), and the outcome is answered. */
  async approve(callId: string, reason = ''): Promise<CallOutcome> {
    return this.decide('runs.approve', callId, reason);
  }

  /** Reject a held call: it never runs. */
  async reject(callId: string, reason = ''): Promise<CallOutcome> {
    return this.decide('runs.reject', callId, reason);
  }

  private async decide(route: 'runs.approve' | 'runs.reject', callId: string, reason: string): Promise<CallOutcome> {
    const o = await this.http.json<CallOutcome>(route, {
      ids: { id: this.id, call: callId },
      json: { reason },
      extraTimeoutMs: 120_000,
    });
    this.data = o.run;
    return o;
  }

  /** Append a step: `model_step`, `handover`, `completed` or `failed`. */
  async step(kind: string, data?: unknown): Promise<this> {
    this.data = await this.http.json<RunData>('runs.step', {
      ids: { id: this.id },
      json: data === undefined ? { kind } : { kind, data },
    });
    return this;
  }

  /** The signed, versioned RunState document of the run as it is now. */
  async state(): Promise<StateDocument> {
    return this.http.json<StateDocument>('runs.state', { ids: { id: this.id } });
  }
}
