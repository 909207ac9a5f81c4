/**
 * stasis as a sandbox provider of the OpenAI Agents SDK for TypeScript
 * (`@openai/agents` 0.20.x, `@openai/agents/sandbox`):
 *
 * ```ts
 * import { run } from '@openai/agents';
 * import { StasisSandboxClient } from 'stasis-client/agents';
 * const result = await run(agent, 'task', { sandbox: { client: new StasisSandboxClient() } });
 * ```
 *
 * How the SDK's interfaces map onto stasis (README: "Agents SDK provider"):
 * - `create()` creates a stasis sandbox whose workdir is the manifest's
 *   root, writes the manifest's file and dir entries through the files API
 *   (git_repo entries are cloned by git inside the sandbox, through its
 *   egress policy: git.ts), and (by default) a stasis run for idempotent
 *   tool calls.
 * - `serializeSessionState()` (the runner calls it when it saves a RunState,
 *   e.g. on an approval interruption) takes a native stasis snapshot (memory
 *   and files) and, when the run is interrupted, pauses the sandbox: no
 *   compute while a human decides. Any later request resumes it.
 * - `resume()` reattaches to the sandbox id in the state; when that sandbox
 *   is gone (destroyed, expired) it restores a new one from the state's
 *   snapshot and moves the stasis run there.
 * - `delete()` pauses (default), destroys or keeps the sandbox (`onDelete`).
 * - exec/execCommand/writeStdin run as stasis sessions (on a terminal with
 *   `tty`), so a command still running after its yield time keeps a session
 *   id the model polls with `write_stdin`. Such a command is not terminated
 *   when the run stops (an approval interruption, or the run's end) unless
 *   `onDelete` is `destroy`: the sandbox is paused with it, it continues
 *   after the resume, and the session state records it (SDK session id ->
 *   stasis session and the output already read), so `write_stdin` from a
 *   resumed run, in this process or another, gets its output and exit code.
 * - `resolveExposedPort()` issues a signed URL and serves it on a local
 *   relay (the SDK's endpoints are host:port with the server at `/`).
 */
import {
  Manifest,
  DEFAULT_SANDBOX_ARCHIVE_LIMITS,
  SandboxArchiveError,
  SandboxConfigurationError,
  SandboxError,
  SandboxExposedPortUnavailableError,
  SandboxInvalidManifestPathError,
  SandboxProviderError,
  SandboxUnsupportedFeatureError,
  SandboxWorkspaceArchiveReadError,
  SandboxWorkspaceArchiveWriteError,
  SandboxWorkspaceReadNotFoundError,
  WorkspacePathPolicy,
  normalizeExposedPort,
  normalizeSandboxClientCreateArgs,
  permissionsForSandboxEntry,
  resolveSandboxArchiveLimits,
  recordExposedPortEndpoint,
  type ExecCommandArgs,
  type ExposedPortEndpoint,
  type SandboxArchiveLimits,
  type SandboxConcurrencyLimits,
  type SandboxClientResumeOptions,
  type Entry,
  type SnapshotSpec,
  type WorkspaceArchiveOptions,
  type ListDirectoryArgs,
  type MaterializeEntryArgs,
  type ReadFileArgs,
  type ViewImageArgs,
  type SandboxClient,
  type SandboxClientCreateArgs,
  type SandboxClientOptions,
  type SandboxDirectoryEntry,
  type SandboxExecResult,
  type SandboxSession,
  type SandboxSessionLifecycleOptions,
  type SandboxPreStopHook,
  type SandboxSessionResumeValidationInput,
  type SandboxSessionSerializationOptions,
  type SandboxSessionState,
  type WorkspaceArchiveData,
  type WriteStdinArgs,
} from '@openai/agents/sandbox';
import { UserError, applyDiff, type Editor, type ToolOutputImage } from '@openai/agents';
import {
  MAX_VIEW_IMAGE_BYTES,
  deserializeManifest,
  elapsedSeconds,
  formatExecResponse,
  imageOutputFromBytes,
  isStringRecord,
  mergeManifestDelta,
  mergeManifestEntryDelta,
  rehydratePersistedEnvironmentForRuntime,
  sanitizeEnvironmentForPersistence,
  serializeManifestRecord,
  truncateOutput,
  validateMountCredentialBoundaries,
} from '@openai/agents-core/sandbox/internal';

import { createHash } from 'node:crypto';

import { StasisClient } from '../client.js';
import { NotFound, StasisError } from '../errors.js';
import type { ConnectionOptions } from '../http.js';
import type { Run } from '../runs.js';
import type { Sandbox, Session } from '../sandbox.js';
import type { CallOutcome, FileStat } from '../types.js';
import { materializeGitRepo } from './git.js';
import { checkConcurrencyLimits, concurrencyLimit, readLocalDir, readLocalFile, runLimited, type LocalSourceRules } from './local.js';
import { PortRelay } from './relay.js';
import {
  FINGERPRINT_SCRIPT,
  FINGERPRINT_VERSION,
  dropSnapshot,
  loadSnapshot,
  rehydrateSnapshotSpec,
  saveSnapshot,
  serializeSnapshotSpec,
  snapshotMode,
} from './snapshots.js';
import { archiveProblem } from './tar.js';

export const BACKEND_ID = 'stasis';

/** A manifest path naming the workspace root itself. */
const isRootPath = (p: string) => p === '' || p === '.' || p === './';

/** Sandbox states in which the sandbox still exists (a paused one resumes on use). */
const ALIVE = new Set(['creating', 'running', 'pausing', 'paused', 'resuming']);

export type OnDelete = 'pause' | 'destroy' | 'keep';

export interface StasisSandboxClientOptions extends SandboxClientOptions {
  /** stasis manifest fields other than `workdir` (the SDK manifest's root): backend, image, resources, lifecycle, network, env, ... */
  manifest?: Record<string, unknown>;
  /** What `delete()` does with the sandbox: pause (default), destroy or keep. */
  onDelete?: OnDelete;
  /** Take a stasis snapshot when the runner saves the session state (default true): resume restores it when the sandbox is gone. */
  snapshotOnSerialize?: boolean;
  /** Pause the sandbox when the run is interrupted and its session preserved (default true). */
  pauseOnInterrupt?: boolean;
  /** How long those snapshots are kept (default: the server's, 7 days). */
  snapshotTtlSecs?: number;
  /** Create a stasis run with the sandbox for idempotent tool calls (default true). */
  recordRun?: boolean;
  /** Ports `resolveExposedPort` may open (empty: any). */
  exposedPorts?: number[];
  /** Lifetime of the signed URL behind an exposed port (default a day). */
  portUrlTtlSecs?: number;
  /** Where `local_file` / `local_dir` sources may come from on this machine (with the manifest's extraPathGrants; default: the working directory). */
  localSourceBaseDir?: string;
  /** How many manifest entries and local_dir files are uploaded at once (the SDK's option; positive numbers, default 4). */
  concurrencyLimits?: SandboxConcurrencyLimits;
  /** Limits a workspace archive must meet before it is extracted (the SDK's option; null: none). */
  archiveLimits?: SandboxArchiveLimits | null;
  /** The SDK's snapshot spec (`local`, `remote`, `noop`); none: native stasis snapshots (see snapshots.ts). */
  snapshot?: SnapshotSpec | null;
  /**
   * Mount entries this client materializes itself (the SDK's custom mount
   * materializer hook): called once per mount target after the other
   * entries, parents before nested targets. Without it mount entries are
   * refused.
   */
  materializeMount?: (args: MountMaterializeArgs) => Promise<void>;
  /** Which mount entries `materializeMount` handles (default: all). */
  supportsMount?: (entry: Entry) => boolean;
}

/** What a mount materializer gets: the entry's workspace-relative path, the entry, and the session. */
export interface MountMaterializeArgs {
  logicalPath: string;
  entry: Entry;
  session: StasisSandboxSession;
}

/** How a session materializes entries: client-side settings, never in the state. */
interface MaterializeSettings {
  baseDir?: string;
  concurrencyLimits?: SandboxConcurrencyLimits;
  materializeMount?: (args: MountMaterializeArgs) => Promise<void>;
  supportsMount?: (entry: Entry) => boolean;
}

const isMountEntry = (entry: { type: string }) => entry.type === 'mount' || entry.type.endsWith('_mount');

/** A `local_bind` mount entry: a directory of the daemon's host bound into the sandbox. */
const isLocalBind = (entry: Entry) =>
  entry.type === 'mount' && (entry as { mountStrategy?: { type?: unknown } }).mountStrategy?.type === 'local_bind';

/**
 * The manifest's `local_bind` mounts as stasis mounts (read-only host binds,
 * fixed when the sandbox is made; the source must lie under a root the
 * operator allowed with `stasis serve --allow-mount`, on the daemon's host).
 * A read-write bind is refused: stasis mounts are read-only.
 */
function localBindMounts(manifest: Manifest): { source: string; target: string }[] {
  const out: { source: string; target: string }[] = [];
  for (const t of manifest.mountTargets()) {
    if (!isLocalBind(t.entry)) continue;
    const e = t.entry as { source?: unknown; readOnly?: unknown };
    if (e.readOnly === false) {
      throw new SandboxUnsupportedFeatureError(`${BACKEND_ID} binds host directories read-only: ${t.logicalPath} asks for a read-write local_bind mount`, {
        provider: BACKEND_ID,
        feature: 'mount.local_bind.readWrite',
        path: t.logicalPath,
      });
    }
    if (typeof e.source !== 'string' || !e.source.startsWith('/')) {
      throw new SandboxConfigurationError(`local_bind mount ${t.logicalPath} needs an absolute source path on the daemon's host`, { provider: BACKEND_ID });
    }
    out.push({ source: e.source, target: t.mountPath });
  }
  return out;
}

/** A mount entry the settings materialize. */
function mountHandled(settings: MaterializeSettings, entry: Entry): boolean {
  return isMountEntry(entry) && settings.materializeMount !== undefined && (settings.supportsMount?.(entry) ?? true);
}

export interface StasisSandboxSessionState extends SandboxSessionState {
  sandboxId: string;
  /** The daemon the sandbox lives on (never a token: the resuming client brings its own). */
  baseUrl: string;
  stasisManifest: Record<string, unknown>;
  onDelete: OnDelete;
  snapshotOnSerialize: boolean;
  pauseOnInterrupt: boolean;
  snapshotTtlSecs?: number;
  /** The latest stasis snapshot taken for this session (`snap-...`). */
  snapshotId?: string;
  /** The stasis run recording this session's idempotent tool calls (`run-...`). */
  runId?: string;
  configuredExposedPorts: number[];
  portUrlTtlSecs: number;
  environment: Record<string, string>;
  /** Commands `exec` left running, by the SDK's session id: their stasis session and the output offset the model has read to. */
  processes?: Record<string, ProcessRef>;
  /** The SDK snapshot spec in force (none: native stasis snapshots). */
  snapshotSpec?: SnapshotSpec | null;
}

/** A command still running at its last update (kept in the state so a resumed run reaches it). */
export interface ProcessRef {
  session: string;
  offset: number;
  tty: boolean;
}

const DEFAULT_EXEC_YIELD_MS = 10_000;
const DEFAULT_WRITE_STDIN_YIELD_MS = 250;

type Process = { session: Session; tty: boolean; interrupted?: boolean };

type AuthorizedRoot = { root: string; readOnly: boolean; path: string };

/** Symlinks followed while resolving one path before it is refused (Linux's ELOOP limit). */
const MAX_SYMLINKS = 40;

function isUnder(path: string, root: string): boolean {
  return root === '/' || path === root || path.startsWith(`${root}/`);
}

function components(path: string): string[] {
  return path.split('/').filter((p) => p !== '' && p !== '.');
}

/**
 * `path` (absolute) with every symlink resolved inside the sandbox, one
 * component at a time through the files API's stat (which does not follow a
 * final symlink and names its target); from the first missing component on,
 * the rest stays as written (normalised), as `realpath -m` does.
 */
async function realpath(sbx: Sandbox, path: string): Promise<string> {
  let todo = components(path);
  let resolved: string[] = [];
  let hops = 0;
  while (todo.length > 0) {
    const name = todo.shift()!;
    if (name === '..') {
      resolved.pop();
      continue;
    }
    const candidate = `/${[...resolved, name].join('/')}`;
    let st: FileStat;
    try {
      st = await sbx.files.stat(candidate);
    } catch (e) {
      // Missing, or a component that is not a directory (ENOTDIR: invalid_state
      // on the process backend, invalid_argument on the microVM one).
      if (e instanceof StasisError && ['not_found', 'invalid_state', 'invalid_argument'].includes(e.code)) {
        resolved.push(name);
        for (const rest of todo) {
          if (rest === '..') resolved.pop();
          else resolved.push(rest);
        }
        return `/${resolved.join('/')}`;
      }
      throw providerError('stat', e);
    }
    if (st.kind === 'symlink' && st.symlink_target !== undefined) {
      if (++hops > MAX_SYMLINKS) throw new SandboxInvalidManifestPathError(`too many levels of symlinks: ${path}`, { path });
      if (st.symlink_target.startsWith('/')) resolved = [];
      todo = [...components(st.symlink_target), ...todo];
      continue;
    }
    resolved.push(name);
  }
  return `/${resolved.join('/')}`;
}

/** An SDK sandbox session backed by one stasis sandbox. */
export class StasisSandboxSession implements SandboxSession<StasisSandboxSessionState> {
  /** How the sandbox was obtained: created, reattached or restored. */
  origin: 'created' | 'reattached' | 'restored';
  private readonly processes = new Map<number, Process>();
  private nextProcessId = 1;
  private readonly relays = new Map<number, PortRelay>();
  private readonly preStopHooks = new Set<SandboxPreStopHook>();
  private preStopRan = false;
  private archiveLimits: SandboxArchiveLimits | null | undefined;
  /** Where local_file / local_dir sources may come from, and upload concurrency (client-side settings, never in the state). */
  localSources: MaterializeSettings = {};
  /** Entry paths of the local_bind mounts the sandbox was made with. */
  bindsAtCreate = new Set<string>();
  /** The workspace root and grants as resolved when the session was made (see {@link pinRoots}). */
  private pinned: AuthorizedRoot[] | undefined;

  constructor(
    readonly state: StasisSandboxSessionState,
    private sbx: Sandbox,
    readonly api: StasisClient,
    origin: 'created' | 'reattached' | 'restored',
  ) {
    this.origin = origin;
  }

  /** The stasis sandbox behind this session (pause, fork, snapshots, ...). */
  get sandbox(): Sandbox {
    return this.sbx;
  }

  get sandboxId(): string {
    return this.state.sandboxId;
  }

  async running(): Promise<boolean> {
    try {
      return (await this.sbx.refresh()).state === 'running';
    } catch (e) {
      if (e instanceof NotFound) return false;
      throw e;
    }
  }

  async start(): Promise<void> {
    await this.sbx.refresh();
    if (this.sbx.state === 'paused') await this.sbx.resume();
    else if (!ALIVE.has(this.sbx.state)) {
      throw new SandboxProviderError(`stasis sandbox ${this.sbx.id} is ${this.sbx.state}`, { provider: BACKEND_ID });
    }
  }

  supportsPty(): boolean {
    return true;
  }

  // -- paths --

  /**
   * A path as the SDK resolves it, lexically: relative to the workspace
   * root, and inside the root or an extra path grant (read-only grants
   * refuse writes), else `SandboxInvalidManifestPathError`. File helpers go
   * through {@link checked}, which also resolves symlinks.
   */
  private abs(path: string | undefined, forWrite = false): string {
    const policy = new WorkspacePathPolicy({
      root: this.state.manifest.root,
      extraPathGrants: this.state.manifest.extraPathGrants,
    });
    return policy.resolve(path && path !== '.' ? path : undefined, { forWrite }).path;
  }

  /**
   * A path as the SDK's tools address it (relative to the workspace root, or
   * absolute inside the root or a grant) as the sandbox path it names;
   * lexical, as the SDK's providers do (symlinks are checked when a file
   * helper uses it).
   */
  resolveSandboxPath(path: string): string {
    return this.abs(path);
  }

  /** The workspace root and the grants, each resolved inside the sandbox. */
  private async resolveRoots(): Promise<AuthorizedRoot[]> {
    const roots: AuthorizedRoot[] = [{ root: await realpath(this.sbx, this.state.manifest.root), readOnly: false, path: this.state.manifest.root }];
    for (const g of this.state.manifest.extraPathGrants) {
      roots.push({ root: await realpath(this.sbx, g.path), readOnly: g.readOnly, path: g.path });
    }
    return roots;
  }

  /**
   * Resolve the root and grants now and keep them: replacing the root or a
   * grant's alias by a symlink afterwards authorizes nothing new.
   */
  async pinRoots(): Promise<void> {
    this.pinned = undefined;
    this.pinned = await this.resolveRoots();
  }

  /**
   * {@link abs}, then the path resolved inside the sandbox (every symlink,
   * through the files API's stat: no process runs) must stay inside the root
   * (as pinned) or a grant (the most specific one decides read-only), else
   * `SandboxInvalidManifestPathError`: a symlink in the workspace pointing
   * out of it is not followed. Returns the path as written (a leaf symlink
   * keeps its meaning for the operation).
   */
  private async checked(path: string | undefined, forWrite = false): Promise<string> {
    const lexical = this.abs(path, forWrite);
    const resolved = await realpath(this.sbx, lexical);
    const roots = this.pinned ?? (await this.resolveRoots());
    if (isUnder(resolved, roots[0]!.root)) return lexical;
    const grant = roots
      .slice(1)
      .filter((g) => isUnder(resolved, g.root))
      .sort((a, b) => b.root.length - a.root.length)[0];
    if (!grant) {
      throw new SandboxInvalidManifestPathError(`Sandbox path "${path}" escapes the workspace root.`, {
        path,
        resolvedPath: resolved,
      });
    }
    if (forWrite && grant.readOnly) {
      throw new UserError(`Sandbox path "${path}" uses read-only extra path grant "${grant.path}".`);
    }
    return lexical;
  }

  private logical(path: string, name: string): string {
    return path === '.' || path === '' ? name : `${path.replace(/\/+$/, '')}/${name}`;
  }

  // -- exec --

  private shellArgv(args: ExecCommandArgs): string[] {
    const shell = args.shell ?? 'sh';
    return [shell, args.login === false ? '-c' : '-lc', args.cmd];
  }

  async exec(args: ExecCommandArgs): Promise<SandboxExecResult> {
    const start = Date.now();
    const tty = args.tty ?? false;
    const cwd = await this.checked(args.workdir);
    let session: Session;
    try {
      session = await this.sbx.sessions.start(this.shellArgv(args), {
        env: this.state.environment,
        cwd,
        user: args.runAs,
        pty: tty ? { cols: 120, rows: 40 } : undefined,
      });
    } catch (e) {
      throw providerError('exec', e);
    }
    const p: Process = { session, tty };
    const out = await collect(p, args.yieldTimeMs ?? DEFAULT_EXEC_YIELD_MS);
    const text = truncateOutput(out.text, args.maxOutputTokens);
    if (out.ended) {
      return {
        output: text.text,
        stdout: out.stdout,
        stderr: out.stderr,
        wallTimeSeconds: elapsedSeconds(start),
        exitCode: out.exitCode ?? 1,
        originalTokenCount: text.originalTokenCount,
      };
    }
    const known = Object.keys(this.state.processes ?? {}).map(Number);
    const sessionId = Math.max(this.nextProcessId, ...known.map((n) => n + 1));
    this.nextProcessId = sessionId + 1;
    this.processes.set(sessionId, p);
    this.remember(sessionId, p);
    return {
      output: text.text,
      stdout: out.stdout,
      stderr: out.stderr,
      wallTimeSeconds: elapsedSeconds(start),
      sessionId,
      originalTokenCount: text.originalTokenCount,
    };
  }

  async execCommand(args: ExecCommandArgs): Promise<string> {
    return formatExecResponse(await this.exec(args));
  }

  /** Record a still-running command in the state (its output offset moves as it is read). */
  private remember(id: number, p: Process): void {
    this.state.processes = { ...(this.state.processes ?? {}), [String(id)]: { session: p.session.id, offset: p.session.offset, tty: p.tty } };
  }

  private forget(id: number): void {
    if (!this.state.processes) return;
    const { [String(id)]: _gone, ...rest } = this.state.processes;
    this.state.processes = rest;
  }

  /** A command this session object did not start (the run resumed from its state) that the state records. */
  private async reattach(id: number): Promise<Process | undefined> {
    const ref = this.state.processes?.[String(id)];
    if (!ref) return undefined;
    try {
      const session = await this.sbx.sessions.get(ref.session);
      session.offset = ref.offset;
      const p: Process = { session, tty: ref.tty };
      this.processes.set(id, p);
      return p;
    } catch (e) {
      if (!(e instanceof NotFound)) throw providerError('write_stdin', e);
      this.forget(id);
      return undefined;
    }
  }

  async writeStdin(args: WriteStdinArgs): Promise<string> {
    const p = this.processes.get(args.sessionId) ?? (await this.reattach(args.sessionId));
    if (!p) {
      return formatExecResponse({ output: `write_stdin failed: session not found: ${args.sessionId}`, wallTimeSeconds: 0, exitCode: 1 });
    }
    const start = Date.now();
    let chars = args.chars ?? '';
    if (!p.tty && chars.includes('\u0003')) {
      // No terminal to deliver ^C: SIGINT goes to the command's process
      // group (a daemon without session signals kills it), and an
      // interrupted command reports the exit of an interrupt (130), as a
      // shell would.
      await interrupt(p.session);
      p.interrupted = true;
      chars = chars.split('\u0003').join('');
    }
    if (chars.length > 0) {
      try {
        await p.session.write(chars);
      } catch (e) {
        if (!(e instanceof StasisError && e.code === 'invalid_state')) throw providerError('write_stdin', e);
      }
    }
    const out = await collect(p, args.yieldTimeMs ?? DEFAULT_WRITE_STDIN_YIELD_MS);
    if (out.ended && p.interrupted) out.exitCode = 130;
    const text = truncateOutput(out.text, args.maxOutputTokens);
    if (out.ended) {
      this.processes.delete(args.sessionId);
      this.forget(args.sessionId);
    } else this.remember(args.sessionId, p);
    return formatExecResponse({
      output: text.text,
      wallTimeSeconds: elapsedSeconds(start),
      ...(out.ended ? { exitCode: out.exitCode ?? 1 } : { sessionId: args.sessionId }),
      originalTokenCount: text.originalTokenCount,
    });
  }

  // -- files --

  async readFile(args: ReadFileArgs): Promise<Uint8Array> {
    const path = await this.checked(args.path);
    const bounded = typeof args.maxBytes === 'number';
    if (bounded && args.maxBytes! <= 0) return new Uint8Array();
    let data: Uint8Array;
    try {
      // A bounded read asks for that range only, not the whole file.
      data = await this.sbx.files.read(path, bounded ? { offset: 0, length: args.maxBytes } : {});
    } catch (e) {
      if (e instanceof NotFound) throw new SandboxWorkspaceReadNotFoundError(`file not found: ${args.path}`, { path });
      throw providerError('read', e);
    }
    return bounded && data.byteLength > args.maxBytes! ? data.subarray(0, args.maxBytes) : data;
  }

  async writeFile(path: string, content: string | Uint8Array): Promise<void> {
    await this.sbx.files.write(await this.checked(path, true), content);
  }

  async listDir(args: ListDirectoryArgs): Promise<SandboxDirectoryEntry[]> {
    const entries = await this.sbx.files.list(await this.checked(args.path));
    return entries.map((e) => ({
      name: e.name,
      path: this.logical(args.path, e.name),
      type: e.kind === 'file' ? 'file' : e.kind === 'dir' ? 'dir' : 'other',
    }));
  }

  async pathExists(path: string): Promise<boolean> {
    return this.sbx.files.exists(await this.checked(path));
  }

  async directoryExists(path: string): Promise<boolean> {
    const target = await this.checked(path);
    try {
      await this.sbx.files.list(target);
      return true;
    } catch (e) {
      if (e instanceof StasisError && (e.code === 'not_found' || e.code === 'invalid_argument')) return false;
      throw e;
    }
  }

  /** An image in the sandbox for the model (the filesystem capability's view_image). */
  async viewImage(args: ViewImageArgs): Promise<ToolOutputImage> {
    const path = await this.checked(args.path);
    let st: FileStat;
    try {
      st = await this.sbx.files.stat(path);
    } catch (e) {
      if (e instanceof NotFound) throw new UserError(`Image file not found: ${args.path}`);
      throw providerError('stat', e);
    }
    if (st.kind === 'dir') throw new UserError(`Image path is not a file: ${args.path}`);
    const bytes = await this.readFile({ path: args.path, maxBytes: MAX_VIEW_IMAGE_BYTES + 1 });
    if (bytes.byteLength > MAX_VIEW_IMAGE_BYTES) {
      throw new SandboxProviderError(`image exceeds ${MAX_VIEW_IMAGE_BYTES} bytes: ${args.path}`, { provider: BACKEND_ID });
    }
    return imageOutputFromBytes(args.path, bytes);
  }

  /**
   * The filesystem capability's apply_patch editor: diffs applied to files
   * read and written through the files API. A create over an existing file
   * is refused (an exclusive write: atomic in the sandbox).
   */
  createEditor(): Editor {
    const text = async (path: string) => new TextDecoder().decode(await this.readFile({ path }));
    return {
      createFile: async (op) => {
        try {
          await this.sbx.files.write(await this.checked(op.path, true), applyDiff('', op.diff, 'create'), { exclusive: true });
        } catch (e) {
          if (e instanceof StasisError && e.code === 'already_exists') {
            throw new UserError(`apply_patch create_file: file already exists: ${op.path} (use update_file)`);
          }
          throw e;
        }
        return { status: 'completed', output: `created ${op.path}` };
      },
      updateFile: async (op) => {
        let before: string;
        try {
          before = await text(op.path);
        } catch (e) {
          if (e instanceof SandboxWorkspaceReadNotFoundError) return { status: 'failed', output: `${op.path} not found` };
          throw e;
        }
        const after = applyDiff(before, op.diff);
        if (op.moveTo && op.moveTo !== op.path) {
          await this.writeFile(op.moveTo, after);
          await this.sbx.files.remove(await this.checked(op.path, true));
          return { status: 'completed', output: `updated ${op.path} -> ${op.moveTo}` };
        }
        await this.writeFile(op.path, after);
        return { status: 'completed', output: `updated ${op.path}` };
      },
      deleteFile: async (op) => {
        try {
          await this.sbx.files.remove(await this.checked(op.path, true));
        } catch (e) {
          if (e instanceof StasisError && (e.code === 'not_found' || e.code === 'invalid_state')) return { status: 'failed', output: `${op.path}: ${e.message}` };
          throw e;
        }
        return { status: 'completed', output: `deleted ${op.path}` };
      },
    };
  }

  /**
   * Write the manifest's file and dir entries into the sandbox with their
   * permissions (the SDK's default, 0755, when an entry names none), and
   * merge the manifest (its environment included) into the session's.
   */
  async applyManifest(manifest: Manifest): Promise<void> {
    refuseHostPathGrants(manifest);
    await this.writeEntries(manifest);
    if (manifest !== this.state.manifest) {
      this.state.environment = { ...this.state.environment, ...(await manifest.resolveEnvironment()) };
      this.state.manifest = mergeManifestDelta(this.state.manifest, manifest);
    }
  }

  /**
   * Write one entry (a file, or a dir with its children) at a
   * workspace-relative path now, and add it to the session's manifest (the
   * SDK's skills and memory capabilities use this).
   */
  async materializeEntry(args: MaterializeEntryArgs): Promise<void> {
    const root = this.state.manifest.root.replace(/\/+$/, '');
    // The path as the SDK draws the workspace (lexically), then mount
    // credentials by the SDK's rules, before anything is resolved in the sandbox.
    this.abs(args.path, true);
    if (isMountEntry(args.entry)) {
      validateMountCredentialBoundaries(new Manifest({ root: this.state.manifest.root, entries: { [args.path]: args.entry } }));
    }
    refuseUnsupportedEntry(args.path, args.entry);
    let target: string;
    try {
      target = await this.checked(args.path, true);
    } catch (e) {
      if (!(e instanceof SandboxInvalidManifestPathError)) throw e;
      throw new SandboxInvalidManifestPathError(`Sandbox materialization path "${args.path}" escapes the workspace root through a symbolic link.`, {
        path: args.path,
      });
    }
    if (target !== root && !target.startsWith(`${root}/`)) {
      throw new SandboxInvalidManifestPathError(`materialized entries must be inside the workspace root: ${args.path}`, { path: args.path });
    }
    const logical = target.slice(root.length + 1);
    await this.writeEntries(new Manifest({ root: this.state.manifest.root, entries: { [logical]: args.entry } }));
    this.state.manifest = mergeManifestEntryDelta(this.state.manifest, logical, args.entry);
  }

  /**
   * The entries of `manifest`, written with their permissions: file and dir
   * entries from their content, local_file and local_dir entries uploaded
   * from this machine (by the SDK's rules: see local.ts), git_repo entries
   * cloned inside the sandbox through its egress policy (see git.ts).
   */
  private async writeEntries(manifest: Manifest): Promise<void> {
    const dirModes: [string, number][] = [];
    const rules: LocalSourceRules = {
      baseDir: this.localSources.baseDir,
      grants: [...this.state.manifest.extraPathGrants, ...manifest.extraPathGrants].map((g) => g.hostPath ?? g.path),
    };
    const limits = this.localSources.concurrencyLimits;
    let mounts = false;
    for (const { absolutePath, entry } of manifest.iterEntries()) refuseUnsupportedEntry(absolutePath, entry);
    for (const { absolutePath, entry } of manifest.iterEntries()) {
      const mode = permissionsForSandboxEntry(entry.permissions).toMode() & 0o1777;
      if (mountHandled(this.localSources, entry)) {
        mounts = true; // after the other entries, below
      } else if (isLocalBind(entry) && this.bindsAtCreate.has(absolutePath)) {
        // Bound when the sandbox was made.
      } else if (entry.type === 'file') {
        await this.sbx.files.write(absolutePath, entry.content, { mode });
      } else if (entry.type === 'dir') {
        await this.sbx.files.mkdir(absolutePath);
        dirModes.push([absolutePath, mode]);
      } else if (entry.type === 'local_file') {
        const file = await readLocalFile(entry.src, rules);
        await this.sbx.files.write(absolutePath, file.bytes, { mode: entry.permissions ? mode : file.mode });
      } else if (entry.type === 'local_dir') {
        const tree = await readLocalDir(entry.src, rules, limits);
        for (const d of tree.dirs) await this.sbx.files.mkdir(d ? `${absolutePath}/${d}` : absolutePath);
        await runLimited(tree.files, concurrencyLimit(limits?.localDirFiles), async (f) => {
          await this.sbx.files.write(`${absolutePath}/${f.rel}`, f.bytes, { mode: f.mode });
        });
        if (entry.permissions) dirModes.push([absolutePath, mode]);
      } else if (entry.type === 'git_repo') {
        // Cloned inside the sandbox, through its egress policy (git.ts).
        await this.checkMaterializationTarget(absolutePath, manifest.root);
        await materializeGitRepo({ sbx: this.sbx, env: this.state.environment, realpath: (p) => realpath(this.sbx, p) }, absolutePath, entry);
        dirModes.push([absolutePath, mode]);
      } else {
        throw new SandboxUnsupportedFeatureError(
          `stasis does not materialize ${entry.type} manifest entries (${absolutePath}); use file, dir, local_file, local_dir or git_repo entries, or stasis mounts in the stasis manifest`,
          { provider: BACKEND_ID, entryType: entry.type },
        );
      }
    }
    for (const [path, mode] of dirModes) {
      const r = await this.sbx.exec(['chmod', mode.toString(8), '--', path], { cwd: '/' });
      if (!r.ok) throw new SandboxProviderError(`chmod ${path}: ${r.stderr.slice(-500)}`, { provider: BACKEND_ID });
    }
    // Mounts last, in the SDK's materialization order (a parent target
    // before the targets nested in it).
    if (!mounts) return;
    for (const { logicalPath, entry } of manifest.mountTargetsForMaterialization()) {
      if (mountHandled(this.localSources, entry)) await this.localSources.materializeMount!({ logicalPath, entry, session: this });
    }
  }

  /**
   * An entry's destination must not lead out of the workspace root through
   * a symlink already in the sandbox (the SDK's materialization rule).
   */
  private async checkMaterializationTarget(absolutePath: string, root: string): Promise<void> {
    const resolved = await realpath(this.sbx, absolutePath);
    if (!isUnder(resolved, await realpath(this.sbx, root))) {
      const logical = absolutePath.slice(root.replace(/\/+$/, '').length + 1);
      throw new SandboxInvalidManifestPathError(`Sandbox materialization path "${logical || '.'}" escapes the workspace root.`, {
        path: logical,
        resolvedPath: resolved,
      });
    }
  }

  /** A digest of the workspace tree without its ephemeral entries (see snapshots.ts). */
  async fingerprint(): Promise<string> {
    const excludes = [...this.state.manifest.ephemeralPersistencePaths()].sort();
    // An ephemeral root: nothing of the workspace persists.
    if (excludes.some(isRootPath)) return createHash('sha256').digest('hex');
    const r = await this.sbx.exec(['sh', '-c', FINGERPRINT_SCRIPT, 'sh', this.state.manifest.root, ...excludes], { timeoutMs: 300_000, cwd: '/' });
    if (!r.ok) throw new SandboxWorkspaceArchiveReadError(`fingerprint failed: ${r.stderr.slice(-2000)}`, { path: this.state.manifest.root });
    return r.stdout.trim();
  }

  /** A tar of the workspace (the manifest's root), without its ephemeral entries. */
  async persistWorkspace(): Promise<Uint8Array> {
    const root = this.state.manifest.root;
    const tmp = `/tmp/.stasis-workspace-${crypto.randomUUID()}.tar`;
    const ephemeral = [...this.state.manifest.ephemeralPersistencePaths()].sort();
    // An ephemeral root: nothing of the workspace persists (an empty tar).
    if (ephemeral.some(isRootPath)) return new Uint8Array(10240);
    const excludes = ephemeral.map((p) => `--exclude=./${p}`);
    try {
      // Members in name order (as the SDK's providers write them: limits on
      // restore then name the same member everywhere).
      let r = await this.sbx.exec(['tar', '-C', root, '--sort=name', ...excludes, '-cf', tmp, '.'], { timeoutMs: 300_000, cwd: '/' });
      if (!r.ok && /sort/.test(r.stderr)) r = await this.sbx.exec(['tar', '-C', root, ...excludes, '-cf', tmp, '.'], { timeoutMs: 300_000, cwd: '/' });
      if (!r.ok) throw new SandboxWorkspaceArchiveReadError(`tar failed: ${r.stderr.slice(-2000)}`, { path: root });
      return await this.sbx.files.read(tmp);
    } catch (e) {
      if (e instanceof SandboxWorkspaceArchiveReadError) throw e;
      throw new SandboxWorkspaceArchiveReadError(`persisting ${root}: ${(e as Error).message}`, { path: root });
    } finally {
      await this.sbx.exec(['rm', '-f', tmp], { cwd: '/' }).catch(() => undefined);
    }
  }

  setArchiveLimits(limits?: SandboxArchiveLimits | null): void {
    this.archiveLimits = limits;
  }

  /**
   * Extract a tar (from {@link persistWorkspace}) into the workspace, after
   * checking it: members and links that would leave the workspace, devices,
   * and archives over the limits are refused with `SandboxArchiveError`.
   */
  async hydrateWorkspace(data: WorkspaceArchiveData, options: WorkspaceArchiveOptions = {}): Promise<void> {
    const root = this.state.manifest.root;
    const tmp = `/tmp/.stasis-workspace-${crypto.randomUUID()}.tar`;
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data instanceof Uint8Array ? data : new Uint8Array(data);
    const requested = options.archiveLimits !== undefined ? options.archiveLimits : this.archiveLimits;
    const limits = requested === undefined ? DEFAULT_SANDBOX_ARCHIVE_LIMITS : resolveSandboxArchiveLimits(requested);
    const problem = archiveProblem(bytes, limits);
    if (problem) {
      throw new SandboxArchiveError(`refusing the workspace archive: ${problem.message}`, { provider: BACKEND_ID, ...problem.details });
    }
    try {
      await this.sbx.files.write(tmp, bytes);
      // The archive replaces the workspace (as the SDK's providers do: a file
      // made after the snapshot is gone after the restore). It is extracted
      // beside the root first, and the old content removed only once that
      // succeeded, so a failed extraction leaves the workspace as it was.
      const r = await this.sbx.exec(['sh', '-c', HYDRATE_SCRIPT, 'sh', root, tmp], { timeoutMs: 300_000, cwd: '/' });
      if (!r.ok) throw new SandboxWorkspaceArchiveWriteError(`tar failed: ${r.stderr.slice(-2000)}`, { path: root });
    } catch (e) {
      if (e instanceof SandboxWorkspaceArchiveWriteError) throw e;
      throw new SandboxWorkspaceArchiveWriteError(`hydrating ${root}: ${(e as Error).message}`, { path: root });
    }
  }

  // -- ports --

  async resolveExposedPort(port: number): Promise<ExposedPortEndpoint> {
    normalizeExposedPort(port);
    const allowed = this.state.configuredExposedPorts;
    if (allowed.length > 0 && !allowed.includes(port)) {
      throw new SandboxConfigurationError(`${BACKEND_ID} was not configured to expose port ${port} (exposed: ${allowed.join(', ')}).`, {
        provider: BACKEND_ID,
        port,
      });
    }
    const existing = this.relays.get(port);
    if (existing) {
      const recorded = this.state.exposedPorts?.[String(port)];
      if (recorded) return recorded;
    }
    try {
      const url = await this.sbx.ports.url(port, { ttlSecs: this.state.portUrlTtlSecs });
      const relay = new PortRelay(url.url);
      const local = await relay.start();
      this.relays.set(port, relay);
      return recordExposedPortEndpoint(this.state, { host: local.host, port: local.port, tls: false }, port);
    } catch (e) {
      throw new SandboxExposedPortUnavailableError(`port ${port} of ${this.sbx.id}: ${(e as Error).message}`, {
        provider: BACKEND_ID,
        port,
      });
    }
  }

  /** Stop the local relays of exposed ports (their signed URLs expire on their own). */
  async closePortRelays(): Promise<void> {
    const relays = [...this.relays.values()];
    this.relays.clear();
    await Promise.all(relays.map((r) => r.close()));
  }

  // -- stasis extras --

  /** The stasis run that records this session's idempotent tool calls (created on first use). */
  async run(): Promise<Run> {
    if (this.state.runId) return this.api.runs.get(this.state.runId);
    const run = await this.api.runs.create(this.state.sandboxId);
    this.state.runId = run.id;
    return run;
  }

  /**
   * Run `cmd` once per `idempotencyKey` (e.g. the SDK's tool call id): a
   * retry after a crash or a resume answers the recorded outcome and runs
   * nothing.
   */
  async toolCall(idempotencyKey: string, cmd: string | string[], opts: { sideEffecting?: boolean; timeoutMs?: number } = {}): Promise<CallOutcome> {
    const run = await this.run();
    return run.call(idempotencyKey, cmd, { sideEffecting: opts.sideEffecting ?? true, timeoutMs: opts.timeoutMs, cwd: this.state.manifest.root });
  }

  /** Take a stasis snapshot now and record it in the state. */
  async snapshot(): Promise<string> {
    const snap = await this.sbx.snapshot({ ttlSecs: this.state.snapshotTtlSecs });
    this.state.snapshotId = snap.id;
    return snap.id;
  }

  // -- lifecycle --

  private async endProcesses(): Promise<void> {
    const ps = [...this.processes.values()];
    this.processes.clear();
    this.state.processes = {};
    await Promise.all(ps.map((p) => p.session.kill().catch(() => undefined)));
  }

  /**
   * A hook run before the session stops (the SDK's capabilities flush
   * state into the workspace this way), while the sandbox still runs; the
   * returned function unregisters it.
   */
  registerPreStopHook(hook: SandboxPreStopHook): () => void {
    this.preStopHooks.add(hook);
    this.preStopRan = false;
    return () => {
      this.preStopHooks.delete(hook);
    };
  }

  /**
   * Run the registered pre-stop hooks, once per stop: every hook runs even
   * if one fails, and the first failure is thrown after.
   */
  async runPreStopHooks(): Promise<void> {
    if (this.preStopRan) return;
    this.preStopRan = true;
    let failure: unknown;
    for (const hook of [...this.preStopHooks]) {
      try {
        await hook();
      } catch (e) {
        failure ??= e;
      }
    }
    if (failure !== undefined) throw failure;
  }

  /**
   * The first phase of the SDK's cleanup: stop what this client runs for
   * the session (port relays) and, when the sandbox is to be destroyed, the
   * commands in it. A paused (or kept) sandbox keeps its running commands:
   * they continue when it resumes.
   */
  async stop(_options?: SandboxSessionLifecycleOptions): Promise<void> {
    if (this.state.onDelete === 'destroy') await this.endProcesses();
    await this.closePortRelays();
  }

  /** The second phase: the `onDelete` policy (pause by default, destroy, or keep). */
  async shutdown(_options?: SandboxSessionLifecycleOptions): Promise<void> {
    await applyOnDelete(this.sbx, this.state.onDelete);
  }

  /**
   * End the session as the SDK's examples do (`session.close()`): the
   * pre-stop hooks, then stop and shutdown (pause by default, so no sandbox
   * is left running).
   */
  async close(): Promise<void> {
    await this.runPreStopHooks();
    await this.delete();
  }

  /** The runner's cleanup of an owned session: stop, then shutdown (each safe to repeat). */
  async delete(options?: SandboxSessionLifecycleOptions): Promise<void> {
    await this.stop(options);
    await this.shutdown(options);
  }
}

async function applyOnDelete(sbx: Sandbox, policy: OnDelete): Promise<void> {
  if (policy === 'keep') return;
  try {
    await sbx.refresh();
    if (policy === 'destroy') {
      if (sbx.state !== 'destroyed' && sbx.state !== 'destroying') await sbx.destroy();
    } else if (sbx.state === 'running') {
      await sbx.pause();
    }
  } catch (e) {
    if (!(e instanceof StasisError && (e.code === 'not_found' || e.code === 'invalid_state'))) throw e;
  }
}

/**
 * Replace the workspace `$1` by the tar `$2`: extract into a fresh directory
 * beside it, then swap the content; the root `/` is only extracted over.
 */
const HYDRATE_SCRIPT = `set -u
root=$1 tar=$2
trap 'rm -f "$tar"' EXIT
mkdir -p "$root" || exit 1
if [ -L "$root" ]; then echo "the workspace root $root is a symbolic link: refusing to restore into it (snapshot path changed while copying)" >&2; exit 3; fi
if [ "$root" = / ]; then exec tar -C / --no-same-owner -xf "$tar"; fi
stage=$(mktemp -d "$(dirname "$root")/.stasis-hydrate.XXXXXX") || exit 1
if ! tar -C "$stage" --no-same-owner -xf "$tar"; then rm -rf "$stage"; exit 1; fi
find "$root" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + || exit 1
find "$stage" -mindepth 1 -maxdepth 1 -exec mv -- {} "$root"/ \\; || exit 1
rmdir "$stage"`;

/**
 * A window of session output as stdout and stderr: the daemon's split when
 * it keeps the streams apart, else (an older daemon) all of it as stdout.
 */
export function splitStreams(r: { bytes: Uint8Array; stdoutBytes?: Uint8Array; stderrBytes?: Uint8Array }): {
  out: Uint8Array;
  err: Uint8Array;
} {
  if (r.stdoutBytes && r.stderrBytes) return { out: r.stdoutBytes, err: r.stderrBytes };
  return { out: r.bytes, err: new Uint8Array() };
}

/** The unread output a poll returns at most (the SDK's local providers keep 1 MiB characters). */
const MAX_UNREAD_OUTPUT = 1024 * 1024;
/** An offset past any output: the daemon answers the end offset without bytes. */
const PAST_END = Number.MAX_SAFE_INTEGER;

/** Output of a process for up to `yieldMs` (less if it ends): combined, and split into stdout and stderr. */
async function collect(
  p: Process,
  yieldMs: number,
): Promise<{ text: string; stdout: string; stderr: string; ended: boolean; exitCode: number | null }> {
  const deadline = Date.now() + yieldMs;
  const chunks: Uint8Array[] = [];
  const outs: Uint8Array[] = [];
  const errs: Uint8Array[] = [];
  let ended = false;
  let exitCode: number | null = null;
  // Unread output is capped as the SDK's providers cap it: only its last
  // MAX_UNREAD_OUTPUT bytes are read, after a notice of how much was
  // skipped (the daemon's end offset tells without reading the rest).
  let dropped = 0;
  // A daemon that forgets a session once it is killed (older microVM guest
  // agents) answers not_found for the command ^C ended: it ended.
  const read = async (offset: number, waitMs: number) => {
    try {
      return await p.session.output(offset, waitMs);
    } catch (e) {
      if (p.interrupted && e instanceof NotFound) return undefined;
      throw e;
    }
  };
  const probe = await read(PAST_END, 0);
  if (probe && probe.next_offset - p.session.offset > MAX_UNREAD_OUTPUT) {
    dropped = probe.next_offset - MAX_UNREAD_OUTPUT - p.session.offset;
    p.session.offset = probe.next_offset - MAX_UNREAD_OUTPUT;
  }
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0) break;
    const r = await read(p.session.offset, Math.min(left, 60_000));
    if (!r) {
      ended = true;
      break;
    }
    p.session.offset = r.next_offset;
    if (r.bytes.length > 0) {
      chunks.push(r.bytes);
      const split = splitStreams(r);
      outs.push(split.out);
      errs.push(split.err);
    } else if (!r.running) {
      ended = true;
      exitCode = r.exit_code ?? null;
      break;
    }
  }
  const dec = (parts: Uint8Array[]) => new TextDecoder().decode(Buffer.concat(parts));
  const notice = dropped > 0 ? `[...${dropped} characters truncated from process output...]\n` : '';
  return { text: notice + dec(chunks), stdout: dec(outs), stderr: dec(errs), ended, exitCode };
}

/**
 * ^C for a command without a terminal: SIGINT to its process group. A daemon
 * (or microVM guest agent) that cannot send session signals refuses it
 * (invalid_argument): then the command is killed.
 */
async function interrupt(session: Session): Promise<void> {
  try {
    await session.kill({ signal: 'INT' });
  } catch (e) {
    if (!(e instanceof StasisError && (e.code === 'invalid_argument' || e.code === 'unsupported'))) throw e;
    await session.kill();
  }
}

function providerError(op: string, e: unknown): Error {
  if (e instanceof SandboxError) return e;
  return new SandboxProviderError(`stasis ${op}: ${(e as Error).message}`, { provider: BACKEND_ID, cause: String(e) });
}

/** Creates and resumes SDK sandbox sessions backed by stasis sandboxes. */
export class StasisSandboxClient implements SandboxClient<StasisSandboxClientOptions, StasisSandboxSessionState> {
  readonly backendId = BACKEND_ID;
  /**
   * false: the runner then passes no snapshot spec of its own (it would
   * default to `local`), so a saved run is backed by a native stasis
   * snapshot (memory and files) unless the caller names a spec.
   */
  readonly supportsDefaultOptions = false;
  readonly api: StasisClient;
  private readonly defaults: StasisSandboxClientOptions;
  /** Live sessions of this process by sandbox id (serialization pauses them). */
  private readonly live = new Map<string, StasisSandboxSession>();

  /** Connection as for {@link StasisClient} (`baseUrl`, `token`/`$STASIS_TOKEN`/`tokenFile`, ...), and default options. */
  constructor(opts: ConnectionOptions & { options?: StasisSandboxClientOptions } = {}) {
    this.api = new StasisClient(opts);
    this.defaults = opts.options ?? {};
  }

  async create(
    args?: SandboxClientCreateArgs<StasisSandboxClientOptions> | Manifest,
    manifestOptions?: StasisSandboxClientOptions,
  ): Promise<StasisSandboxSession> {
    const norm = normalizeSandboxClientCreateArgs(args, manifestOptions);
    const opts: StasisSandboxClientOptions = { ...this.defaults, ...(norm.options ?? {}) };
    const manifest = norm.manifest;
    const concurrencyLimits = norm.concurrencyLimits ?? opts.concurrencyLimits;
    checkConcurrencyLimits(concurrencyLimits);
    const snapshotSpec = norm.snapshot ?? opts.snapshot ?? null;
    snapshotMode(snapshotSpec);
    checkManifest(manifest, opts.manifest ?? {}, opts);
    const stasisManifest: Record<string, unknown> = { ...(opts.manifest ?? {}) };
    const binds = localBindMounts(manifest);
    if (binds.length > 0) stasisManifest.mounts = [...((stasisManifest.mounts as unknown[]) ?? []), ...binds];
    let sbx: Sandbox;
    try {
      sbx = await this.api.create({ manifest: { ...stasisManifest, workdir: manifest.root } });
    } catch (e) {
      throw providerError('create', e);
    }
    const state: StasisSandboxSessionState = {
      manifest,
      snapshot: null,
      sandboxId: sbx.id,
      baseUrl: this.api.baseUrl,
      stasisManifest,
      onDelete: opts.onDelete ?? 'pause',
      snapshotOnSerialize: opts.snapshotOnSerialize ?? true,
      pauseOnInterrupt: opts.pauseOnInterrupt ?? true,
      snapshotTtlSecs: opts.snapshotTtlSecs,
      configuredExposedPorts: normalizeExposedPorts(opts.exposedPorts),
      portUrlTtlSecs: opts.portUrlTtlSecs ?? 24 * 3600,
      environment: await manifest.resolveEnvironment(),
      snapshotSpec,
    };
    const session = new StasisSandboxSession(state, sbx, this.api, 'created');
    session.bindsAtCreate = new Set(manifest.mountTargets().filter((t) => isLocalBind(t.entry)).map((t) => t.absolutePath));
    session.localSources = {
      baseDir: opts.localSourceBaseDir,
      concurrencyLimits,
      materializeMount: opts.materializeMount,
      supportsMount: opts.supportsMount,
    };
    const archiveLimits = norm.archiveLimits !== undefined ? norm.archiveLimits : opts.archiveLimits;
    if (archiveLimits !== undefined) session.setArchiveLimits(archiveLimits);
    try {
      await session.applyManifest(manifest);
      await session.pinRoots();
      if (opts.recordRun ?? true) state.runId = (await this.api.runs.create(sbx.id)).id;
    } catch (e) {
      await sbx.destroy().catch(() => undefined);
      throw e;
    }
    this.live.set(sbx.id, session);
    return session;
  }

  /**
   * The SDK's resume validation, before anything is materialized: the state
   * must name a stasis sandbox, on the daemon this client talks to (a state
   * saved against another daemon is refused rather than resumed, or
   * restored, elsewhere), and a remote snapshot spec needs its store among
   * this client's options.
   */
  validateSessionStateForResume(
    input: SandboxSessionResumeValidationInput<StasisSandboxSessionState>,
    _options?: SandboxClientResumeOptions<StasisSandboxClientOptions>,
  ): void {
    const raw = input.state as Record<string, unknown>;
    const sandboxId = raw.sandboxId;
    if (typeof sandboxId !== 'string' || !/^sb-[A-Za-z0-9_-]+$/.test(sandboxId)) {
      throw new SandboxConfigurationError('stasis session state has no valid sandboxId', { provider: BACKEND_ID });
    }
    const strip = (u: string) => u.replace(/\/+$/, '');
    if (typeof raw.baseUrl === 'string' && strip(raw.baseUrl) !== strip(this.api.baseUrl)) {
      throw new SandboxConfigurationError(
        `stasis session state belongs to the daemon at ${raw.baseUrl}; this client talks to ${this.api.baseUrl}`,
        { provider: BACKEND_ID, stateBaseUrl: raw.baseUrl, clientBaseUrl: this.api.baseUrl },
      );
    }
    const spec = raw.snapshotSpec as { type?: unknown; store?: unknown } | null | undefined;
    if (spec?.type === 'remote' && spec.store === undefined && this.defaults.snapshot?.type !== 'remote') {
      throw new SandboxConfigurationError('stasis session state uses a remote snapshot spec: give the client its store (options.snapshot)', {
        provider: BACKEND_ID,
      });
    }
  }

  async resume(
    state: StasisSandboxSessionState,
    options: SandboxClientResumeOptions<StasisSandboxClientOptions> = {},
  ): Promise<StasisSandboxSession> {
    let sbx: Sandbox | undefined;
    try {
      sbx = await this.api.get(state.sandboxId);
      if (!ALIVE.has(sbx.state)) sbx = undefined;
    } catch (e) {
      if (!(e instanceof NotFound)) throw providerError('resume', e);
    }
    const spec = state.snapshotSpec ?? null;
    const mode = snapshotMode(spec);
    const archiveLimits = options.archiveLimits !== undefined ? options.archiveLimits : this.defaults.archiveLimits;
    if (sbx) {
      const session = new StasisSandboxSession(state, sbx, this.api, 'reattached');
      if (archiveLimits !== undefined) session.setArchiveLimits(archiveLimits);
      if ((mode === 'local' || mode === 'remote') && state.snapshot && state.snapshotFingerprint) {
        // The workspace drifted since the save (changed outside the run):
        // the snapshot the state names is what the run continues from.
        if ((await session.fingerprint()) !== state.snapshotFingerprint) {
          await session.hydrateWorkspace(await loadSnapshot(state.snapshot, spec));
        }
      }
      await session.pinRoots();
      this.live.set(sbx.id, session);
      return session;
    }
    if (mode !== 'stasis') {
      if (!state.snapshot || mode === 'noop') {
        throw new SandboxProviderError(`stasis sandbox ${state.sandboxId} is gone and no local snapshot could be restored (snapshot spec ${mode})`, {
          provider: BACKEND_ID,
        });
      }
      // Checked against the limits before a sandbox is made for it.
      const data = await loadSnapshot(state.snapshot, spec);
      const fresh = await this.api.create({ manifest: { ...state.stasisManifest, workdir: state.manifest.root } });
      const session = new StasisSandboxSession(state, fresh, this.api, 'restored');
      if (archiveLimits !== undefined) session.setArchiveLimits(archiveLimits);
      try {
        await session.hydrateWorkspace(data);
      } catch (e) {
        await fresh.destroy().catch(() => undefined);
        throw e;
      }
      state.sandboxId = fresh.id;
      state.processes = {};
      await session.pinRoots();
      this.live.set(fresh.id, session);
      return session;
    }
    if (!state.snapshotId) {
      throw new SandboxProviderError(`stasis sandbox ${state.sandboxId} is gone and the session state names no snapshot`, {
        provider: BACKEND_ID,
      });
    }
    const restored = await this.api.snapshots.restore(state.snapshotId, {
      manifest: { ...state.stasisManifest, workdir: state.manifest.root },
    });
    state.sandboxId = restored.id;
    if (state.runId) {
      // The run moves with the session: its document, rebound to the new sandbox.
      const doc = await (await this.api.runs.get(state.runId)).state();
      await this.api.runs.resume(doc, { sandbox: restored.id });
    }
    const session = new StasisSandboxSession(state, restored, this.api, 'restored');
    await session.pinRoots();
    this.live.set(restored.id, session);
    return session;
  }

  async delete(state: StasisSandboxSessionState): Promise<void> {
    const session = this.live.get(state.sandboxId);
    if (session) {
      await session.delete();
      return;
    }
    try {
      await applyOnDelete(await this.api.get(state.sandboxId), state.onDelete);
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
    }
  }

  async serializeSessionState(
    state: StasisSandboxSessionState,
    options: SandboxSessionSerializationOptions = {},
  ): Promise<Record<string, unknown>> {
    let sbx: Sandbox | undefined;
    try {
      sbx = await this.api.get(state.sandboxId);
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
    }
    const spec = state.snapshotSpec ?? null;
    const mode = snapshotMode(spec);
    if (mode === 'noop') {
      // Nothing is snapshotted, and an earlier local snapshot goes.
      await dropSnapshot(state.snapshot);
      state.snapshot = null;
      state.snapshotFingerprint = null;
      state.snapshotFingerprintVersion = null;
    }
    if (sbx && ALIVE.has(sbx.state)) {
      if (mode === 'stasis' && state.snapshotOnSerialize) {
        // Earlier snapshots are kept: a RunState saved before still names them.
        state.snapshotId = (await sbx.snapshot({ ttlSecs: state.snapshotTtlSecs })).id;
      } else if (mode === 'local' || mode === 'remote') {
        const session = this.live.get(sbx.id) ?? new StasisSandboxSession(state, sbx, this.api, 'reattached');
        const previous = state.snapshot;
        state.snapshot = await saveSnapshot(spec!, await session.persistWorkspace());
        if (previous && previous.path !== state.snapshot.path) await dropSnapshot(previous);
        state.snapshotFingerprint = await session.fingerprint();
        state.snapshotFingerprintVersion = FINGERPRINT_VERSION;
      }
      if (options.preserveOwnedSession && state.pauseOnInterrupt && sbx.state === 'running') {
        // The run waits (e.g. for an approval): no compute meanwhile; the
        // next request, from this process or another, resumes it.
        await sbx.pause().catch((e) => {
          if (!(e instanceof StasisError && e.code === 'invalid_state')) throw e;
        });
      }
    }
    return {
      manifest: serializeManifestRecord(state.manifest),
      sandboxId: state.sandboxId,
      baseUrl: state.baseUrl,
      stasisManifest: state.stasisManifest,
      onDelete: state.onDelete,
      snapshotOnSerialize: state.snapshotOnSerialize,
      pauseOnInterrupt: state.pauseOnInterrupt,
      ...(state.snapshotTtlSecs !== undefined ? { snapshotTtlSecs: state.snapshotTtlSecs } : {}),
      ...(state.snapshotId ? { snapshotId: state.snapshotId } : {}),
      ...(state.runId ? { runId: state.runId } : {}),
      configuredExposedPorts: state.configuredExposedPorts,
      portUrlTtlSecs: state.portUrlTtlSecs,
      ...(state.processes && Object.keys(state.processes).length > 0 ? { processes: state.processes } : {}),
      // Runtime environment changes survive a resume (ephemeral and referenced values are not kept).
      environment: sanitizeEnvironmentForPersistence(state),
      snapshotSpec: serializeSnapshotSpec(spec),
      snapshot: state.snapshot ?? null,
      snapshotFingerprint: state.snapshotFingerprint ?? null,
      snapshotFingerprintVersion: state.snapshotFingerprintVersion ?? null,
    };
  }

  async deserializeSessionState(raw: Record<string, unknown>): Promise<StasisSandboxSessionState> {
    const sandboxId = raw.sandboxId;
    if (typeof sandboxId !== 'string' || !sandboxId.startsWith('sb-')) {
      throw new SandboxConfigurationError('stasis session state has no sandboxId', { provider: BACKEND_ID });
    }
    const manifest = deserializeManifest(raw.manifest as Record<string, unknown>);
    const onDelete = raw.onDelete === 'destroy' || raw.onDelete === 'keep' ? raw.onDelete : 'pause';
    return {
      manifest,
      snapshot: (raw.snapshot as SandboxSessionState['snapshot']) ?? null,
      ...(raw.exposedPorts ? { exposedPorts: raw.exposedPorts as Record<string, ExposedPortEndpoint> } : {}),
      workspaceReady: raw.workspaceReady as boolean | undefined,
      sandboxId,
      baseUrl: typeof raw.baseUrl === 'string' ? raw.baseUrl : this.api.baseUrl,
      stasisManifest: (raw.stasisManifest as Record<string, unknown>) ?? {},
      onDelete,
      snapshotOnSerialize: raw.snapshotOnSerialize !== false,
      pauseOnInterrupt: raw.pauseOnInterrupt !== false,
      snapshotTtlSecs: typeof raw.snapshotTtlSecs === 'number' ? raw.snapshotTtlSecs : undefined,
      snapshotId: typeof raw.snapshotId === 'string' ? raw.snapshotId : undefined,
      runId: typeof raw.runId === 'string' ? raw.runId : undefined,
      configuredExposedPorts: Array.isArray(raw.configuredExposedPorts) ? (raw.configuredExposedPorts as number[]) : [],
      portUrlTtlSecs: typeof raw.portUrlTtlSecs === 'number' ? raw.portUrlTtlSecs : 24 * 3600,
      environment: await runtimeEnvironment(manifest, raw.environment),
      processes: processRefs(raw.processes),
      snapshotSpec: rehydrateSnapshotSpec(raw.snapshotSpec, this.defaults.snapshot),
      snapshotFingerprint: typeof raw.snapshotFingerprint === 'string' ? raw.snapshotFingerprint : null,
      snapshotFingerprintVersion: typeof raw.snapshotFingerprintVersion === 'string' ? raw.snapshotFingerprintVersion : null,
    };
  }
}

/** The environment a resumed session runs with: the persisted one (runtime changes included), the manifest's values resolved again. */
async function runtimeEnvironment(manifest: Manifest, raw: unknown): Promise<Record<string, string>> {
  if (!isStringRecord(raw)) return manifest.resolveEnvironment();
  const runtime = Object.fromEntries(Object.entries(raw).filter(([key]) => !(key in manifest.environment)));
  return { ...runtime, ...(await rehydratePersistedEnvironmentForRuntime(manifest, raw)) };
}

function processRefs(raw: unknown): Record<string, ProcessRef> {
  const out: Record<string, ProcessRef> = {};
  if (!raw || typeof raw !== 'object') return out;
  for (const [id, ref] of Object.entries(raw as Record<string, Partial<ProcessRef>>)) {
    if (/^[0-9]+$/.test(id) && ref && typeof ref.session === 'string') {
      out[id] = { session: ref.session, offset: typeof ref.offset === 'number' ? ref.offset : 0, tty: ref.tty === true };
    }
  }
  return out;
}

/** A grant whose host path differs from its sandbox path cannot be honoured: the sandbox sees no host. */
/** The SDK's rule: integers 1..65535 (else `UserError`), each once. */
function normalizeExposedPorts(ports: number[] | undefined): number[] {
  return [...new Set((ports ?? []).map((p) => normalizeExposedPort(p)))];
}

function refuseHostPathGrants(manifest: Manifest): void {
  const grant = manifest.extraPathGrants.find((g) => g.hostPath !== undefined);
  if (grant) {
    throw new SandboxUnsupportedFeatureError(
      `stasis does not support path grant hostPath for "${grant.path}": a sandbox sees no host path (omit hostPath, or use stasis mounts)`,
      { provider: BACKEND_ID, feature: 'manifest.extraPathGrants.hostPath', path: grant.path },
    );
  }
}

/** An entry stasis cannot honour: group ownership (every sandbox process runs as the sandbox user). */
function refuseUnsupportedEntry(path: string, entry: { group?: unknown }): void {
  if (entry.group !== undefined) {
    throw new SandboxUnsupportedFeatureError(`${BACKEND_ID} does not support sandbox entry group ownership yet: ${path}`, {
      provider: BACKEND_ID,
      feature: 'entry.group',
      path,
    });
  }
}

function checkManifest(manifest: Manifest, stasisManifest: Record<string, unknown>, settings: MaterializeSettings = {}): void {
  // Credential-bearing mounts first, by the SDK's own rules (its wording).
  validateMountCredentialBoundaries(manifest);
  refuseHostPathGrants(manifest);
  if (manifest.users.length > 0) {
    throw new SandboxUnsupportedFeatureError(
      `${BACKEND_ID} does not support manifest users yet (every sandbox process runs as the sandbox user).`,
      { provider: BACKEND_ID, feature: 'manifest.users' },
    );
  }
  if (manifest.groups.length > 0) {
    throw new SandboxUnsupportedFeatureError(
      `${BACKEND_ID} does not support manifest groups yet (every sandbox process runs as the sandbox user).`,
      { provider: BACKEND_ID, feature: 'manifest.groups' },
    );
  }
  if ('workdir' in stasisManifest) {
    throw new SandboxConfigurationError('set the workspace with the SDK manifest root, not the stasis manifest workdir', {
      provider: BACKEND_ID,
    });
  }
  for (const { absolutePath, entry } of manifest.iterEntries()) {
    refuseUnsupportedEntry(absolutePath, entry);
    if (!['file', 'dir', 'local_file', 'local_dir', 'git_repo'].includes(entry.type) && !mountHandled(settings, entry) && !isLocalBind(entry)) {
      throw new SandboxUnsupportedFeatureError(
        `stasis does not materialize ${entry.type} manifest entries (${absolutePath}); use file, dir, local_file, local_dir or git_repo entries, or stasis mounts in the stasis manifest`,
        { provider: BACKEND_ID, entryType: entry.type },
      );
    }
  }
}
