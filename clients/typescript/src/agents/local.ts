/**
 * `local_file` and `local_dir` manifest entries: their sources are on the
 * machine the client runs on, read here and uploaded into the sandbox.
 *
 * The rules are the SDK's for its own local providers, so an agent behaves
 * the same on stasis as on UnixLocal or Docker:
 * - a source must lie inside the local source base directory (the
 *   `localSourceBaseDir` option, else the working directory) or inside one
 *   of the manifest's `extraPathGrants`;
 * - a source that is a symlink, or that has a symlink among its ancestors
 *   (below the top-level directory), is refused, and so is a symlink
 *   anywhere inside a `local_dir`;
 * - files are opened with O_NOFOLLOW, so a source swapped for a symlink
 *   between the check and the read is refused too;
 * - `concurrencyLimits` bound how many entries, and how many files of a
 *   `local_dir`, are in flight at once (positive numbers, default 4).
 */
import { constants } from 'node:fs';
import { lstat, open, readdir } from 'node:fs/promises';
import { dirname, join, relative, resolve, isAbsolute } from 'node:path';
import { UserError } from '@openai/agents';
import type { SandboxConcurrencyLimits } from '@openai/agents/sandbox';

export interface LocalSourceRules {
  /** Sources must lie under this directory (default: the working directory)... */
  baseDir?: string;
  /** ...or under one of these host paths (the manifest's extraPathGrants). */
  grants: string[];
}

/** A file to upload: its path relative to the entry's destination ('' for a local_file), bytes and mode. */
export interface LocalFile {
  rel: string;
  bytes: Uint8Array;
  mode: number;
}

export interface LocalTree {
  files: LocalFile[];
  /** Directories (relative to the destination, '' for its top), parents first. */
  dirs: string[];
}

const DEFAULT_CONCURRENCY = 4;

/** A concurrency limit as the SDK accepts it: a finite number >= 1 (floored), else `UserError`. */
export function concurrencyLimit(value: number | undefined): number {
  if (value === undefined) return DEFAULT_CONCURRENCY;
  if (!Number.isFinite(value) || value < 1) throw new UserError('Sandbox concurrency limits must be positive numbers.');
  return Math.floor(value);
}

/** Both limits checked up front (a bad one fails the create before any sandbox is made). */
export function checkConcurrencyLimits(limits: SandboxConcurrencyLimits | undefined): void {
  concurrencyLimit(limits?.manifestEntries);
  concurrencyLimit(limits?.localDirFiles);
}

/** Run `fn` over `items` with at most `limit` at once. */
export async function runLimited<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

function within(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
}

/** The absolute source path, if the rules allow it. */
export function resolveLocalSource(kind: 'local_file' | 'local_dir', src: string, rules: LocalSourceRules): string {
  const base = resolve(rules.baseDir ?? process.cwd());
  const path = resolve(base, src);
  if (within(base, path) || rules.grants.some((g) => within(resolve(g), path))) return path;
  throw new UserError(`${kind} source must stay within the local source base directory or manifest.extraPathGrants: ${path} (base: ${base})`);
}

async function refuseSymlinkAncestors(path: string, kind: string): Promise<void> {
  // Every ancestor below the top-level directory (as the SDK checks: a
  // system's /tmp may itself be a link).
  for (let cur = dirname(path); dirname(dirname(cur)) !== dirname(cur); cur = dirname(cur)) {
    if ((await lstat(cur)).isSymbolicLink()) throw new UserError(`${kind} entries do not support symbolic link ancestors: ${path}`);
  }
}

async function readNoFollow(path: string, kind: string): Promise<{ bytes: Uint8Array; mode: number }> {
  let fh;
  try {
    fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ELOOP') throw new UserError(`${kind} entries do not support symbolic links: ${path}`);
    throw e;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw new UserError(`${kind} source is not a regular file: ${path}`);
    return { bytes: new Uint8Array(await fh.readFile()), mode: st.mode & 0o777 };
  } finally {
    await fh.close();
  }
}

/** A local_file's content, by the SDK's rules. */
export async function readLocalFile(src: string, rules: LocalSourceRules): Promise<LocalFile> {
  const path = resolveLocalSource('local_file', src, rules);
  await refuseSymlinkAncestors(path, 'local_file');
  if ((await lstat(path)).isSymbolicLink()) throw new UserError(`local_file entries do not support symbolic links: ${path}`);
  const { bytes, mode } = await readNoFollow(path, 'local_file');
  return { rel: '', bytes, mode };
}

/** A local_dir's tree, by the SDK's rules (no symlink anywhere in it). */
export async function readLocalDir(src: string, rules: LocalSourceRules, limits: SandboxConcurrencyLimits | undefined): Promise<LocalTree> {
  const root = resolveLocalSource('local_dir', src, rules);
  await refuseSymlinkAncestors(root, 'local_dir');
  const st = await lstat(root);
  if (st.isSymbolicLink()) throw new UserError(`local_dir entries do not support symbolic links: ${root}`);
  if (!st.isDirectory()) throw new UserError(`local_dir source is not a directory: ${root}`);
  const tree: LocalTree = { files: [], dirs: [''] };
  const pending: string[] = [];
  const walk = async (rel: string) => {
    for (const e of await readdir(join(root, rel), { withFileTypes: true })) {
      const childRel = rel ? `${rel}/${e.name}` : e.name;
      if (e.isSymbolicLink()) throw new UserError(`local_dir entries do not support symbolic links: ${join(root, childRel)}`);
      if (e.isDirectory()) {
        tree.dirs.push(childRel);
        await walk(childRel);
      } else if (e.isFile()) pending.push(childRel);
      else throw new UserError(`local_dir entries support regular files and directories only: ${join(root, childRel)}`);
    }
  };
  await walk('');
  const files: (LocalFile | undefined)[] = new Array(pending.length);
  await runLimited(
    pending.map((rel, i) => [rel, i] as const),
    concurrencyLimit(limits?.localDirFiles),
    async ([rel, i]) => {
      files[i] = { rel, ...(await readNoFollow(join(root, rel), 'local_dir')) };
    },
  );
  tree.files = files as LocalFile[];
  return tree;
}
