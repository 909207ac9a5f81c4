// What the ported tests need instead of UnixLocal's construction: the stasis
// provider on the suite's daemon, and a way to look at (or change) the
// sandbox's own filesystem where the upstream test used node:fs on the
// UnixLocal workspace directory.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { inject } from 'vitest';
import { tarMembers } from '../dist/agents/tar.js';
import { StasisSandboxClient, type StasisSandboxClientOptions, type StasisSandboxSession } from '../dist/agents/index.js';

declare module 'vitest' {
  export interface ProvidedContext {
    stasis: { backend: string; baseUrl: string; tokenFile?: string };
    /** The loopback git server of git.test.ts (globalSetup.mjs); null without git on this machine. */
    git: { base: string; port: number } | null;
  }
}

export const BACKEND = inject('stasis').backend;

/** Sandboxes made by this test file, destroyed after it (see {@link destroyAll}). */
const made: StasisSandboxSession[] = [];

/**
 * The provider in place of `new UnixLocalSandboxClient({ workspaceBaseDir, ... })`:
 * the SDK-level options (snapshot, concurrencyLimits, archiveLimits,
 * exposedPorts, ...) pass through; sandboxes are destroyed when the test
 * file ends instead of removing a host directory.
 */
export function stasisSandboxClient(options: StasisSandboxClientOptions = {}): StasisSandboxClient {
  const { backend: _b, ...conn } = inject('stasis');
  const client = new StasisSandboxClient({ ...conn, options: { onDelete: 'destroy', recordRun: false, ...options } });
  const create = client.create.bind(client);
  const resume = client.resume.bind(client);
  client.create = (async (...args: Parameters<typeof create>) => {
    const s = await create(...args);
    made.push(s);
    return s;
  }) as typeof client.create;
  client.resume = (async (...args: Parameters<typeof resume>) => {
    const s = await resume(...args);
    made.push(s);
    return s;
  }) as typeof client.resume;
  return client;
}

export async function destroyAll(): Promise<void> {
  const all = made.splice(0);
  await Promise.all(all.map((s) => s.sandbox.destroy().catch(() => undefined)));
}

/** A shell script run inside the session's sandbox (as the upstream tests ran node:fs on the host workspace). */
export async function inBox(session: StasisSandboxSession, script: string): Promise<{ stdout: string; exitCode: number | null }> {
  const r = await session.sandbox.exec(['sh', '-c', script], { cwd: '/' });
  return { stdout: r.stdout, exitCode: r.exitCode };
}

/** The sandbox-side counterparts of node:fs calls on the workspace. */
export function box(session: StasisSandboxSession) {
  const q = (p: string) => `'${p.replace(/'/g, `'\\''`)}'`;
  const must = async (script: string) => {
    const r = await inBox(session, script);
    if (r.exitCode !== 0) throw Object.assign(new Error(`in sandbox: ${script}: exit ${r.exitCode}`), { code: 'ENOENT' });
    return r.stdout;
  };
  return {
    readFile: (p: string) => must(`cat -- ${q(p)}`),
    writeFile: (p: string, data: string) => must(`printf '%s' ${q(data)} > ${q(p)}`),
    mkdir: (p: string) => must(`mkdir -p -- ${q(p)}`),
    symlink: (target: string, p: string) => must(`ln -s -- ${q(target)} ${q(p)}`),
    rm: (p: string) => must(`rm -rf -- ${q(p)}`),
    /** The permission bits (like `stat().mode & 0o777`). */
    mode: async (p: string) => parseInt((await must(`stat -c %a -- ${q(p)}`)).trim(), 8),
    /** Resolves when the path exists (not following a final symlink), rejects like `lstat` otherwise. */
    lstat: (p: string) => must(`test -e ${q(p)} || test -L ${q(p)}`).then(() => true),
  };
}

export const ACTIVE_PROCESS_POLL_MS = 50;
export const ACTIVE_PROCESS_MAX_POLLS = 80;

export async function writeUntilExit(
  session: { writeStdin(args: { sessionId: number; chars?: string; yieldTimeMs?: number }): Promise<string> },
  sessionId: number,
  chars: string,
): Promise<string> {
  let output = await session.writeStdin({ sessionId, chars, yieldTimeMs: ACTIVE_PROCESS_POLL_MS });
  let combinedOutput = output;
  for (let attempt = 0; attempt < ACTIVE_PROCESS_MAX_POLLS && !output.includes('Process exited with code'); attempt += 1) {
    output = await session.writeStdin({ sessionId, chars: '', yieldTimeMs: ACTIVE_PROCESS_POLL_MS });
    combinedOutput += output;
  }
  return combinedOutput;
}

/** Poll a running command until its output shows `expected` (or the polls run out): the output seen. */
export async function waitForOutputContaining(
  session: { writeStdin(args: { sessionId: number; chars?: string; yieldTimeMs?: number }): Promise<string> },
  sessionId: number,
  expected: string,
): Promise<string> {
  let output = '';
  for (let attempt = 0; attempt < ACTIVE_PROCESS_MAX_POLLS && !output.includes(expected); attempt += 1) {
    output += await session.writeStdin({ sessionId, chars: '', yieldTimeMs: ACTIVE_PROCESS_POLL_MS });
  }
  return output;
}

export async function collectActiveCommandOutput(
  session: { writeStdin(args: { sessionId: number; chars?: string; yieldTimeMs?: number }): Promise<string> },
  initialOutput: string,
): Promise<string> {
  const sessionId = Number(initialOutput.match(/Process running with session ID (\d+)/)?.[1]);
  if (!Number.isFinite(sessionId)) return initialOutput;
  return `${initialOutput}${await writeUntilExit(session, sessionId, '')}`;
}

export const ONE_BY_ONE_PNG = Uint8Array.from(
  Buffer.from(
    'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAACXBIWXMAAAPoAAAD6AG1e1JrAAAADUlEQVR4nGP4////fwAJ+wP9KobjigAAAABJRU5ErkJggg==',
    'base64',
  ),
);

/**
 * Whether a local snapshot holds `member` (upstream stats
 * `join(snapshot.path, member)`: UnixLocal copies the workspace tree; stasis
 * keeps the workspace archive, never extracted on this machine). Rejects
 * like `stat` when the snapshot or the member is missing.
 */
export async function snapshotMember(snapshotPath: string, member: string): Promise<true> {
  const tar = new Uint8Array(await readFile(join(snapshotPath, 'workspace.tar')));
  const names = tarMembers(tar).map((m) => m.name.replace(/^(\.\/)+/, '').replace(/\/+$/, ''));
  if (!names.includes(member)) throw Object.assign(new Error(`snapshot has no ${member}`), { code: 'ENOENT' });
  return true;
}

/** Upstream removes the UnixLocal workspace directory: the stasis sandbox is destroyed. */
export async function removeWorkspace(session: StasisSandboxSession): Promise<void> {
  await session.sandbox.destroy();
}
