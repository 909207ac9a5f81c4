/** A sandbox and what it offers: exec, files, sessions and terminals, ports, lifecycle. */
import { InvalidState, NotFound, StasisError, Timeout, errorFromResponse } from './errors.js';
import { Http, type ConnectionOptions } from './http.js';
import type {
  ExecResponse,
  ExecStreamLine,
  FileEntry,
  FileStat,
  NetworkStatus,
  PortUrl,
  PtySize,
  SandboxInfo,
  SessionInfo,
  SessionOutputResponse,
  SnapshotInfo,
  WatchEvent,
} from './types.js';

/** A command: an argv array, or a string run by `sh -c`. */
export type Command = string | readonly string[];

export function argvOf(cmd: Command): string[] {
  if (typeof cmd === 'string') return ['sh', '-c', cmd];
  if (cmd.length === 0) throw new TypeError('an empty command');
  return [...cmd];
}

export interface ExecOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** Default 60000 (the server's default). */
  timeoutMs?: number;
  stdin?: string | Uint8Array;
  /** Run as `USER[:GROUP]` (default: the manifest's `user`, else root). */
  user?: string;
  /** Called with each stdout chunk as it comes (the command is streamed). */
  onStdout?: (data: string, bytes: Uint8Array) => void;
  onStderr?: (data: string, bytes: Uint8Array) => void;
}

/** The result of a finished command. */
export class ExecResult {
  constructor(
    readonly exitCode: number | null,
    readonly signal: number | null,
    readonly stdoutBytes: Uint8Array,
    readonly stderrBytes: Uint8Array,
    readonly timedOut: boolean,
    readonly truncated: boolean,
    readonly durationMs: number,
  ) {}
  get stdout(): string {
    return decoder.decode(this.stdoutBytes);
  }
  get stderr(): string {
    return decoder.decode(this.stderrBytes);
  }
  /** Exited 0 within its time. */
  get ok(): boolean {
    return this.exitCode === 0 && !this.timedOut;
  }
  static fromResponse(r: ExecResponse): ExecResult {
    return new ExecResult(
      r.exit_code ?? null,
      r.signal ?? null,
      b64decode(r.stdout_b64),
      b64decode(r.stderr_b64),
      r.timed_out,
      r.truncated,
      r.duration_ms,
    );
  }
}

/** One event of a streamed command. */
export type ExecEvent =
  | { type: 'stdout' | 'stderr'; data: string; bytes: Uint8Array }
  | { type: 'exit'; result: ExecResult };

const decoder = new TextDecoder();
export const b64decode = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'base64'));
export const b64encode = (b: Uint8Array | string): string =>
  Buffer.from(typeof b === 'string' ? new TextEncoder().encode(b) : b).toString('base64');

function execBody(cmd: Command, o: ExecOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { argv: argvOf(cmd) };
  if (o.env && Object.keys(o.env).length > 0) body.env = o.env;
  if (o.cwd !== undefined) body.cwd = o.cwd;
  if (o.timeoutMs !== undefined) body.timeout_ms = o.timeoutMs;
  if (o.stdin !== undefined) body.stdin_b64 = b64encode(o.stdin);
  if (o.user !== undefined) body.user = o.user;
  return body;
}

/** A stasis sandbox. Get one with `Sandbox.create`, `Sandbox.connect` or `StasisClient`. */
export class Sandbox {
  readonly files: Files;
  readonly sessions: Sessions;
  readonly ports: Ports;

  constructor(
    readonly http: Http,
    public info: SandboxInfo,
  ) {
    this.files = new Files(this);
    this.sessions = new Sessions(this);
    this.ports = new Ports(this);
  }

  /** Create a sandbox (`manifest`: every field optional; or start from a `template`). */
  static async create(opts: CreateSandboxOptions & ConnectionOptions = {}): Promise<Sandbox> {
    return createSandbox(new Http(opts), opts);
  }

  /** A handle on an existing sandbox (a paused one resumes on its next request). */
  static async connect(id: string, opts: ConnectionOptions = {}): Promise<Sandbox> {
    const http = new Http(opts);
    return new Sandbox(http, await http.json<SandboxInfo>('sandbox.get', { ids: { id } }));
  }

  /** The tenant's sandboxes (every page), filtered by state, labels, creation time. */
  static async list(opts: ListOptions & ConnectionOptions = {}): Promise<Sandbox[]> {
    return listSandboxes(new Http(opts), opts);
  }

  get id(): string {
    return this.info.id;
  }
  /** The state as of the last answer (see {@link refresh}). */
  get state(): string {
    return this.info.state;
  }
  get backend(): string {
    return this.info.backend;
  }

  private ids(): Record<string, string> {
    return { id: this.info.id };
  }

  /** Read the sandbox again. */
  async refresh(): Promise<this> {
    this.info = await this.http.json<SandboxInfo>('sandbox.get', { ids: this.ids() });
    return this;
  }

  /** Run a command to its end. With `onStdout`/`onStderr` its output is streamed to them as it comes. */
  async exec(cmd: Command, opts: ExecOptions = {}): Promise<ExecResult> {
    if (opts.onStdout || opts.onStderr) {
      let result: ExecResult | undefined;
      for await (const ev of this.execStream(cmd, opts)) {
        if (ev.type === 'stdout') opts.onStdout?.(ev.data, ev.bytes);
        else if (ev.type === 'stderr') opts.onStderr?.(ev.data, ev.bytes);
        else if (ev.type === 'exit') result = ev.result;
      }
      if (!result) throw new StasisError('the exec stream ended without an exit line');
      return result;
    }
    const r = await this.http.json<ExecResponse>('sandbox.exec', {
      ids: this.ids(),
      json: execBody(cmd, opts),
      extraTimeoutMs: opts.timeoutMs ?? 60_000,
    });
    return ExecResult.fromResponse(r);
  }

  /** Run a command, yielding its output chunks as they come, then its exit. */
  async *execStream(cmd: Command, opts: ExecOptions = {}): AsyncGenerator<ExecEvent> {
    const resp = await this.http.raw('sandbox.exec_stream', {
      ids: this.ids(),
      json: execBody(cmd, opts),
      extraTimeoutMs: opts.timeoutMs ?? 60_000,
    });
    if (!resp.body) throw new StasisError('the exec stream has no body');
    const out: Uint8Array[] = [];
    const err: Uint8Array[] = [];
    for await (const line of ndjsonLines(resp.body)) {
      const ev = line as ExecStreamLine;
      if (ev.type === 'output') {
        const bytes = b64decode(ev.data_b64);
        (ev.stream === 'stderr' ? err : out).push(bytes);
        yield { type: ev.stream === 'stderr' ? 'stderr' : 'stdout', data: ev.data, bytes };
      } else if (ev.type === 'exit') {
        yield {
          type: 'exit',
          result: new ExecResult(
            ev.exit_code ?? null,
            ev.signal ?? null,
            Buffer.concat(out),
            Buffer.concat(err),
            ev.timed_out,
            ev.truncated,
            ev.duration_ms,
          ),
        };
        return;
      } else if (ev.type === 'error') {
        throw errorFromResponse(500, JSON.stringify({ error: { code: ev.code, message: ev.message } }));
      }
    }
    throw new StasisError('the exec stream ended without an exit line');
  }

  /** Start a command on a terminal (`cols` x `rows`), as `stasis shell` does. */
  async pty(cmd: Command = ['sh'], opts: { cols?: number; rows?: number; env?: Record<string, string>; cwd?: string; user?: string } = {}): Promise<Session> {
    return this.sessions.start(cmd, { ...opts, pty: { cols: opts.cols ?? 80, rows: opts.rows ?? 24 } });
  }

  /** Pause: memory (unless `keepMemory: false`) and files go into a snapshot, compute is freed. */
  async pause(opts: { keepMemory?: boolean; standby?: boolean } = {}): Promise<this> {
    const body: Record<string, unknown> = {};
    if (opts.keepMemory !== undefined) body.keep_memory = opts.keepMemory;
    if (opts.standby !== undefined) body.standby = opts.standby;
    this.info = await this.http.json<SandboxInfo>('sandbox.pause', { ids: this.ids(), json: body, extraTimeoutMs: 300_000 });
    return this;
  }

  async resume(): Promise<this> {
    this.info = await this.http.json<SandboxInfo>('sandbox.resume', { ids: this.ids(), extraTimeoutMs: 300_000 });
    return this;
  }

  /** Drop this node's standby and local pause files of the paused sandbox; it next resumes from the store. */
  async evict(): Promise<this> {
    this.info = await this.http.json<SandboxInfo>('sandbox.evict', { ids: this.ids() });
    return this;
  }

  /** Take a snapshot (memory and files), kept `ttlSecs` (default 7 days). */
  async snapshot(opts: { ttlSecs?: number } = {}): Promise<SnapshotInfo> {
    return this.http.json<SnapshotInfo>('sandbox.snapshot', {
      ids: this.ids(),
      json: opts.ttlSecs !== undefined ? { ttl_secs: opts.ttlSecs } : {},
      extraTimeoutMs: 300_000,
    });
  }

  /** `count` copies of this sandbox as it is now, from one snapshot. */
  async fork(count = 1): Promise<{ snapshot: string; sandboxes: Sandbox[]; totalMs: number }> {
    const r = await this.http.json<{ snapshot: string; sandboxes: SandboxInfo[]; total_ms: number }>('sandbox.fork', {
      ids: this.ids(),
      json: { count },
      extraTimeoutMs: 300_000,
    });
    return { snapshot: r.snapshot, sandboxes: r.sandboxes.map((s) => new Sandbox(this.http, s)), totalMs: r.total_ms };
  }

  async destroy(): Promise<this> {
    this.info = await this.http.json<SandboxInfo>('sandbox.destroy', { ids: this.ids(), extraTimeoutMs: 120_000 });
    return this;
  }

  /**
   * Change the lifecycle policy at runtime (audited): `idleTimeoutSecs`,
   * `onIdle` (pause, pause_filesystem, destroy, nothing), `pausedTtlSecs`,
   * `maxLifetimeSecs`, or `timeoutSecs` (destroyed after this much more
   * running time, E2B's setTimeout).
   */
  async setLifecycle(change: {
    idleTimeoutSecs?: number;
    onIdle?: string;
    pausedTtlSecs?: number;
    maxLifetimeSecs?: number;
    timeoutSecs?: number;
  }): Promise<this> {
    const body: Record<string, unknown> = {};
    if (change.idleTimeoutSecs !== undefined) body.idle_timeout_secs = change.idleTimeoutSecs;
    if (change.onIdle !== undefined) body.on_idle = change.onIdle;
    if (change.pausedTtlSecs !== undefined) body.paused_ttl_secs = change.pausedTtlSecs;
    if (change.maxLifetimeSecs !== undefined) body.max_lifetime_secs = change.maxLifetimeSecs;
    if (change.timeoutSecs !== undefined) body.timeout_secs = change.timeoutSecs;
    this.info = await this.http.json<SandboxInfo>('sandbox.lifecycle', { ids: this.ids(), json: body });
    return this;
  }

  /** Destroy the sandbox after `secs` more seconds of running time. */
  async setTimeout(secs: number): Promise<this> {
    return this.setLifecycle({ timeoutSecs: secs });
  }

  /** Host CPU time, RSS and process count. */
  async usage(): Promise<Record<string, unknown>> {
    return this.http.json('sandbox.usage', { ids: this.ids() });
  }

  /** A tar of the manifest's output directories. */
  async outputs(): Promise<Uint8Array> {
    return this.http.bytes('sandbox.outputs', { ids: this.ids(), extraTimeoutMs: 300_000 });
  }

  async network(): Promise<NetworkStatus> {
    return this.http.json<NetworkStatus>('network.get', { ids: this.ids() });
  }

  /** Replace the egress policy (both lists). */
  async setNetwork(policy: { allow?: string[]; deny?: string[] }): Promise<NetworkStatus> {
    return this.http.json<NetworkStatus>('network.set', { ids: this.ids(), json: { allow: policy.allow ?? [], deny: policy.deny ?? [] } });
  }
}

export interface CreateSandboxOptions {
  /** The stasis manifest (backend, image, resources, lifecycle, network, env, workdir, ...). */
  manifest?: Record<string, unknown>;
  /** Key/value labels, listed and filtered on (not part of the manifest). */
  labels?: Record<string, string>;
  /** `name` or `name:version`: start from a template's memory and disk. */
  template?: string;
}

export async function createSandbox(http: Http, opts: CreateSandboxOptions = {}): Promise<Sandbox> {
  const body: Record<string, unknown> = {};
  if (opts.manifest !== undefined) body.manifest = opts.manifest;
  if (opts.template !== undefined) body.template = opts.template;
  if (opts.labels !== undefined) body.labels = opts.labels;
  return new Sandbox(http, await http.json<SandboxInfo>('sandbox.create', { json: body, extraTimeoutMs: 300_000 }));
}

export interface ListOptions {
  /** Only sandboxes in this state (e.g. `paused`). */
  state?: string;
  /** Only sandboxes with all these labels. */
  labels?: Record<string, string>;
  /** Only sandboxes created after this instant (ms since the epoch, or a Date). */
  createdAfter?: number | Date;
}

/** One page of a listing and the cursor of the next (undefined on the last). */
export async function listPage(
  http: Http,
  opts: ListOptions & { limit?: number; cursor?: string } = {},
): Promise<{ sandboxes: Sandbox[]; nextCursor?: string }> {
  const label = opts.labels
    ? Object.entries(opts.labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(',')
    : undefined;
  const createdAfter = opts.createdAfter instanceof Date ? opts.createdAfter.getTime() : opts.createdAfter;
  const resp = await http.raw('sandbox.list', {
    query: { state: opts.state, label, created_after: createdAfter, limit: opts.limit, cursor: opts.cursor },
  });
  const infos = (await resp.json()) as SandboxInfo[];
  return { sandboxes: infos.map((i) => new Sandbox(http, i)), nextCursor: resp.headers.get('x-next-cursor') ?? undefined };
}

/** Every sandbox matching `opts`, page after page. */
export async function listSandboxes(http: Http, opts: ListOptions & { pageSize?: number } = {}): Promise<Sandbox[]> {
  const out: Sandbox[] = [];
  let cursor: string | undefined;
  do {
    const page = await listPage(http, { ...opts, limit: opts.pageSize ?? 1000, cursor });
    out.push(...page.sandboxes);
    cursor = page.nextCursor;
  } while (cursor);
  return out;
}

/** Files in the sandbox; paths are absolute or relative to the workdir. */
export class Files {
  constructor(private readonly sbx: Sandbox) {}

  private ids() {
    return { id: this.sbx.id };
  }

  /** The file's bytes; with `offset`/`length`, only that range (one request, not the whole file). */
  async read(path: string, opts: { offset?: number; length?: number } = {}): Promise<Uint8Array> {
    return this.sbx.http.bytes('files.get', {
      ids: this.ids(),
      query: { path, offset: opts.offset, length: opts.length },
      extraTimeoutMs: 60_000,
    });
  }

  async readText(path: string, opts: { offset?: number; length?: number } = {}): Promise<string> {
    return decoder.decode(await this.read(path, opts));
  }

  /**
   * Write a file (parents are created); `mode` e.g. `0o755`; `exclusive`
   * creates only: a path already taken answers `already_exists` (409).
   */
  async write(path: string, data: string | Uint8Array, opts: { mode?: number; exclusive?: boolean } = {}): Promise<void> {
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    await this.sbx.http.none('files.put', {
      ids: this.ids(),
      query: {
        path,
        mode: opts.mode !== undefined ? opts.mode.toString(8) : undefined,
        exclusive: opts.exclusive ? true : undefined,
      },
      body: bytes,
      extraTimeoutMs: 60_000,
    });
  }

  async list(path = '.'): Promise<FileEntry[]> {
    return this.sbx.http.json<FileEntry[]>('files.list', { ids: this.ids(), query: { path } });
  }

  /** The entry itself (a symlink is not followed: `kind: 'symlink'` with its `symlink_target`). */
  async stat(path: string): Promise<FileStat> {
    return this.sbx.http.json<FileStat>('files.stat', { ids: this.ids(), query: { path } });
  }

  async exists(path: string): Promise<boolean> {
    return (await this.sbx.http.json<{ exists: boolean }>('files.exists', { ids: this.ids(), query: { path } })).exists;
  }

  /** Create a directory; with `parents` (default) its parents too, and an existing one is fine. */
  async mkdir(path: string, opts: { parents?: boolean } = {}): Promise<void> {
    await this.sbx.http.none('files.mkdir', { ids: this.ids(), json: { path, parents: opts.parents ?? true } });
  }

  /** Remove a file, or a directory (a non-empty one only with `recursive`). */
  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.sbx.http.none('files.remove', {
      ids: this.ids(),
      query: { path, recursive: opts.recursive ? true : undefined },
    });
  }

  /** Rename or move. */
  async rename(from: string, to: string): Promise<void> {
    await this.sbx.http.none('files.rename', { ids: this.ids(), json: { from, to } });
  }

  /**
   * Changes under a directory as they happen, until `signal` aborts (an open
   * watch keeps the sandbox from idling). Backends that cannot watch throw
   * `Unsupported`.
   */
  async *watch(path: string, opts: { signal?: AbortSignal } = {}): AsyncGenerator<WatchEvent> {
    const url = this.sbx.http.url('files.watch', { ids: this.ids(), query: { path } });
    let resp: Response;
    try {
      resp = await fetch(url, { headers: this.sbx.http.headers(), signal: opts.signal });
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      throw new StasisError(`watch ${path}: ${(e as Error).message}`, { code: 'connection_failed' });
    }
    if (resp.status !== 200) throw errorFromResponse(resp.status, await resp.text());
    if (!resp.body) return;
    try {
      for await (const ev of ndjsonLines(resp.body)) yield ev as WatchEvent;
    } catch (e) {
      if ((e as Error).name !== 'AbortError') throw e;
    }
  }
}

export interface SessionStartOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** Run on a terminal of this size (else pipes). */
  pty?: PtySize;
  user?: string;
}

/** Long-running sessions (kept across pause/resume, with the same ids). */
export class Sessions {
  constructor(private readonly sbx: Sandbox) {}

  /** Start one; without a command, the manifest's (the image's ENTRYPOINT + CMD). */
  async start(cmd?: Command, opts: SessionStartOptions = {}): Promise<Session> {
    const body: Record<string, unknown> = {};
    if (cmd !== undefined) body.argv = argvOf(cmd);
    if (opts.env) body.env = opts.env;
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.pty) body.pty = opts.pty;
    if (opts.user !== undefined) body.user = opts.user;
    const info = await this.sbx.http.json<SessionInfo>('session.start', { ids: { id: this.sbx.id }, json: body });
    return new Session(this.sbx, info);
  }

  async list(): Promise<SessionInfo[]> {
    return this.sbx.http.json<SessionInfo[]>('session.list', { ids: { id: this.sbx.id } });
  }

  /** A handle on an existing session. */
  async get(id: string): Promise<Session> {
    const info = (await this.list()).find((s) => s.id === id);
    if (!info) throw new NotFound(`no session ${id} in ${this.sbx.id}`);
    return new Session(this.sbx, info);
  }
}

/** The largest offset: reads there only wait for the end. */
const PAST_END = Number.MAX_SAFE_INTEGER;

/** A running session (on a terminal when started with `pty`): input, output from an offset, resize, kill. */
export class Session {
  /** The offset the next {@link read} starts from. */
  offset = 0;
  ended = false;
  exitCode: number | null = null;

  constructor(
    readonly sandbox: Sandbox,
    public info: SessionInfo,
  ) {}

  get id(): string {
    return this.info.id;
  }

  private ids() {
    return { id: this.sandbox.id, session: this.info.id };
  }

  async write(data: string | Uint8Array): Promise<void> {
    await this.sandbox.http.none('session.input', { ids: this.ids(), json: { data_b64: b64encode(data) } });
  }

  /**
   * The output from `offset` (waiting up to `waitMs` for some), and the
   * offset to read from next: `bytes` is stdout and stderr combined;
   * `stdoutBytes` / `stderrBytes` are the same window split, from daemons
   * that keep the streams apart (undefined from older ones).
   */
  async output(
    offset: number,
    waitMs = 0,
  ): Promise<SessionOutputResponse & { bytes: Uint8Array; stdoutBytes?: Uint8Array; stderrBytes?: Uint8Array }> {
    const r = await this.sandbox.http.json<SessionOutputResponse & { stdout_b64?: string; stderr_b64?: string }>('session.output', {
      ids: this.ids(),
      query: { offset, wait_ms: Math.min(waitMs, 60_000) },
      extraTimeoutMs: Math.min(waitMs, 60_000),
    });
    const split =
      typeof r.stdout_b64 === 'string' && typeof r.stderr_b64 === 'string'
        ? { stdoutBytes: b64decode(r.stdout_b64), stderrBytes: b64decode(r.stderr_b64) }
        : {};
    return { ...r, bytes: b64decode(r.data_b64), ...split };
  }

  /** Output since the last read, waiting up to `waitMs` for some. */
  async read(waitMs = 1000): Promise<Uint8Array> {
    const r = await this.output(this.offset, waitMs);
    this.offset = r.next_offset;
    if (!r.running && r.bytes.length === 0) {
      this.ended = true;
      this.exitCode = r.exit_code ?? null;
    }
    return r.bytes;
  }

  /** Output chunks until the session ends. */
  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    while (!this.ended) {
      const data = await this.read(10_000);
      if (data.length > 0) yield data;
    }
  }

  /** Resize its terminal (the foreground job gets SIGWINCH). */
  async resize(cols: number, rows: number): Promise<void> {
    await this.sandbox.http.none('session.resize', { ids: this.ids(), json: { cols, rows } });
    this.info = { ...this.info, pty: { cols, rows } };
  }

  /** Wait for it to exit; its exit code. */
  async wait(timeoutMs?: number): Promise<number | null> {
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    for (;;) {
      const left = deadline === undefined ? 10_000 : Math.min(10_000, deadline - Date.now());
      if (left <= 0) throw new Timeout(`session ${this.id} still running`, { code: 'timeout' });
      const r = await this.output(PAST_END, left);
      if (!r.running) {
        this.exitCode = r.exit_code ?? null;
        return this.exitCode;
      }
    }
  }

  /**
   * Kill it (its process tree), or with `signal` (`INT`, `TERM`, `HUP`, ...)
   * send that signal to its process group: a ^C for a command without a
   * terminal. A daemon that predates signals kills it.
   */
  async kill(opts: { signal?: string } = {}): Promise<void> {
    try {
      await this.sandbox.http.none('session.kill', { ids: this.ids(), ...(opts.signal ? { query: { signal: opts.signal } } : {}) });
    } catch (e) {
      if (!(e instanceof InvalidState || e instanceof NotFound)) throw e;
    }
  }

  /** The WebSocket URL of the session (`.../attach`): binary frames are input/output, text frames JSON control. */
  attachUrl(offset = 0): string {
    return this.sandbox.http.url('session.attach', { ids: this.ids(), query: { offset } }).replace(/^http/, 'ws');
  }

  /**
   * Attach over the daemon's WebSocket (as `stasis shell` does): output as
   * it comes to `onData`, keystrokes with `write`, `resize`; `done` settles
   * with the exit, or with a detach when the sandbox pauses (reattach from
   * its offset). Needs a WebSocket: the global one (Node 22+, or Node 20 with
   * `--experimental-websocket`), or a constructor such as the `ws` package's.
   */
  async attach(opts: AttachOptions = {}): Promise<Attachment> {
    const WS = (opts.WebSocket ?? (globalThis as { WebSocket?: unknown }).WebSocket) as WebSocketCtor | undefined;
    if (!WS) {
      throw new StasisError(
        'attach needs a WebSocket implementation: Node 22+, node --experimental-websocket on Node 20, or opts.WebSocket (e.g. the ws package)',
        { code: 'unsupported' },
      );
    }
    const ws = new WS(this.attachUrl(opts.offset ?? this.offset), { headers: this.sandbox.http.headers() });
    ws.binaryType = 'arraybuffer';
    let attached!: (offset: number) => void;
    let failed!: (e: Error) => void;
    const ready = new Promise<number>((res, rej) => {
      attached = res;
      failed = rej;
    });
    let settle!: (end: AttachEnd) => void;
    const done = new Promise<AttachEnd>((res) => (settle = res));
    let offset = opts.offset ?? this.offset;
    ws.onmessage = (ev: { data: unknown }) => {
      const data = ev.data;
      if (typeof data === 'string') {
        const msg = JSON.parse(data) as { type: string; offset?: number; code?: number | string | null; reason?: string; message?: string };
        if (msg.type === 'attached') {
          offset = msg.offset ?? offset;
          attached(offset);
        } else if (msg.type === 'exit') {
          this.ended = true;
          this.exitCode = typeof msg.code === 'number' ? msg.code : null;
          settle({ type: 'exit', code: this.exitCode });
        } else if (msg.type === 'detached') {
          this.offset = msg.offset ?? offset;
          settle({ type: 'detached', reason: msg.reason ?? '', offset: this.offset });
        } else if (msg.type === 'error') {
          opts.onError?.(new StasisError(msg.message ?? 'attach error', { code: String(msg.code ?? 'internal') }));
        }
        return;
      }
      const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : (data as Uint8Array);
      offset += bytes.byteLength;
      this.offset = offset;
      opts.onData?.(bytes);
    };
    ws.onerror = () => failed(new StasisError(`attaching to session ${this.id} failed`, { code: 'connection_failed' }));
    ws.onclose = (ev: { code?: number; reason?: string }) => {
      failed(new StasisError(`attach closed before it started (${ev.code ?? ''} ${ev.reason ?? ''})`, { code: 'connection_failed' }));
      settle({ type: 'closed', code: ev.code ?? null, reason: ev.reason ?? '' });
    };
    await ready;
    return {
      done,
      write: (d) => ws.send(typeof d === 'string' ? new TextEncoder().encode(d) : d),
      resize: (cols, rows) => ws.send(JSON.stringify({ type: 'resize', cols, rows })),
      close: () => ws.close(1000),
    };
  }
}

type WebSocketCtor = new (
  url: string,
  init?: { headers?: Record<string, string> },
) => {
  binaryType: string;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onclose: ((ev: { code?: number; reason?: string }) => void) | null;
  send(data: string | Uint8Array): void;
  close(code?: number): void;
};

export interface AttachOptions {
  /** Replay output from this offset (default: where this handle got to). */
  offset?: number;
  onData?: (data: Uint8Array) => void;
  onError?: (e: StasisError) => void;
  /** A WebSocket constructor taking `(url, { headers })` (default: the global one). */
  WebSocket?: unknown;
}

/** How an attachment ended: the session exited, the sandbox paused (detached), or the socket closed. */
export type AttachEnd =
  | { type: 'exit'; code: number | null }
  | { type: 'detached'; reason: string; offset: number }
  | { type: 'closed'; code: number | null; reason: string };

export interface Attachment {
  readonly done: Promise<AttachEnd>;
  write(data: string | Uint8Array): void;
  resize(cols: number, rows: number): void;
  close(): void;
}

/** Exposed ports: signed URLs and requests through the daemon's proxy. */
export class Ports {
  constructor(private readonly sbx: Sandbox) {}

  /** A signed URL (`/p/<token>/`) that reaches `port` without an API token, for `ttlSecs` (default 3600). */
  async url(port: number, opts: { ttlSecs?: number } = {}): Promise<PortUrl> {
    const r = await this.sbx.http.json<PortUrl>('ports.url', {
      ids: { id: this.sbx.id, port },
      json: opts.ttlSecs !== undefined ? { ttl_secs: opts.ttlSecs } : {},
    });
    // The daemon names itself by the Host header it was reached with; keep the client's base.
    return { ...r, url: `${this.sbx.http.baseUrl}${r.path}` };
  }

  /** Revoke one URL of `port`, or (without `urlId`) every URL issued for it until now. */
  async revoke(port: number, urlId?: string): Promise<void> {
    if (urlId === undefined) await this.sbx.http.none('ports.revoke_all', { ids: { id: this.sbx.id, port } });
    else await this.sbx.http.none('ports.revoke', { ids: { id: this.sbx.id, port, url_id: urlId } });
  }

  /** A request to the server on `port` through the daemon (with the API token); resumes a paused sandbox. */
  async fetch(port: number, path = '/', init: RequestInit = {}): Promise<Response> {
    const base = this.sbx.http.url('ports.proxy', { ids: { id: this.sbx.id, port }, suffix: '' });
    const headers = new Headers(init.headers);
    for (const [k, v] of Object.entries(this.sbx.http.headers())) if (!headers.has(k)) headers.set(k, v);
    const resp = await fetch(`${base}${path.startsWith('/') ? path : `/${path}`}`, { ...init, headers });
    // The daemon's own refusal (nothing listening) is an error; any answer of
    // the sandbox's server, whatever its status, is returned as it is.
    if (resp.status === 502 && resp.headers.get('content-type')?.startsWith('application/json')) {
      const err = errorFromResponse(resp.status, await resp.clone().text());
      if (err.code === 'port_unreachable') throw err;
    }
    return resp;
  }
}

/** Parse an NDJSON body into values. */
export async function* ndjsonLines(body: ReadableStream<Uint8Array>): AsyncGenerator<unknown> {
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buf += dec.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) yield JSON.parse(line);
    }
  }
  buf += dec.decode();
  if (buf.trim()) yield JSON.parse(buf);
}
