/**
 * `git_repo` manifest entries: cloned inside the sandbox, by the sandbox's
 * own `git`, through the sandbox's egress policy (as the Python provider
 * does: docs/src/agents-sdk.md, "git_repo entries"). Not cloned on the
 * client's machine and uploaded, because:
 * - what a sandbox may reach stays decided by its network policy
 *   (`network.allow` in the stasis manifest), the one place its egress is
 *   audited, not by whatever the client's machine can reach;
 * - nothing of the client's git configuration or credentials reaches a
 *   sandbox implicitly (git's configuration comes from the SDK manifest's
 *   `environment`: `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`);
 * - both SDKs' providers then behave alike, and the client needs no git.
 *
 * The steps and rules are the SDK's UnixLocal ones, run in the sandbox:
 * the repository is `repo` itself when it is a URL (`scheme://...` or
 * `git@...`), else `https://HOST/REPO.git` (host default `github.com`); a
 * ref that looks like a commit id (7 to 40 hex digits) is fetched by id
 * (`init`, `fetch --depth 1 origin REF`, `checkout --detach FETCH_HEAD`)
 * and, when that fails, cloned as a branch or tag name; any other ref is
 * `clone --depth 1 --branch REF`. The clone is made in a temporary
 * directory of the sandbox and copied to the entry's path (its `.git` too,
 * unless a `subpath` picks a directory or a file of the repository, which
 * must stay inside the clone). Failures raise the SDK's errors:
 * `SandboxGitMissingInImageError` (no `git` in the sandbox),
 * `SandboxGitCloneError` (the clone failed: git's stderr, e.g. a host the
 * policy does not allow), `SandboxGitSubpathError`, `SandboxGitCopyError`.
 */
import {
  SandboxGitCloneError,
  SandboxGitCopyError,
  SandboxGitMissingInImageError,
  SandboxGitSubpathError,
  type Entry,
} from '@openai/agents/sandbox';

import type { ExecResult, Sandbox } from '../sandbox.js';
import type { FileStat } from '../types.js';

type GitRepo = Extract<Entry, { type: 'git_repo' }>;

const GIT_CLONE_TIMEOUT_MS = 5 * 60_000;
const COMMIT_REF = /^[0-9a-fA-F]{7,40}$/;

/** What cloning needs from the session. */
export interface GitContext {
  sbx: Sandbox;
  /** The session's environment (the SDK manifest's, resolved): git's configuration may come from it. */
  env: Record<string, string>;
  /** A sandbox path with its symlinks resolved (no process runs). */
  realpath: (path: string) => Promise<string>;
}

/** The repository as git is given it: a URL as written, else `https://HOST/REPO.git`. */
export function gitRepositoryUrl(entry: GitRepo): string {
  const repo = entry.repo;
  if (repo.includes('://') || repo.startsWith('git@')) return repo;
  return `https://${entry.host ?? 'github.com'}/${repo}.git`;
}

const isUnder = (path: string, root: string) => path === root || path.startsWith(`${root}/`);

/**
 * Clone `entry` inside the sandbox and put it (or its subpath) at
 * `destination` (an absolute sandbox path). Returns whether the
 * destination is a directory.
 */
export async function materializeGitRepo(ctx: GitContext, destination: string, entry: GitRepo): Promise<'dir' | 'file'> {
  const run = (argv: string[], timeoutMs = 60_000) => ctx.sbx.exec(argv, { env: ctx.env, cwd: '/', timeoutMs });
  const details = { repo: entry.repo, ref: entry.ref, subpath: entry.subpath };

  const check = await run(['git', '--version']);
  if (!check.ok) {
    throw new SandboxGitMissingInImageError('git_repo entries require `git` in the sandbox image, but `git` was not found.', {
      ...details,
      backend: ctx.sbx.backend,
      ...imageOf(ctx.sbx),
    });
  }

  const url = gitRepositoryUrl(entry);
  const tmp = `/tmp/.stasis-git-${crypto.randomUUID()}`;
  try {
    let result: ExecResult;
    let commitFetchError: ExecResult | undefined;
    if (entry.ref && COMMIT_REF.test(entry.ref)) {
      // A shallow clone of a branch or tag name cannot fetch an arbitrary
      // commit: a commit-looking ref is fetched by id first.
      result = await run(
        [
          'sh',
          '-c',
          'git init -q "$1" && git -C "$1" remote add origin "$2" && git -C "$1" fetch -q --depth 1 --no-tags origin "$3" && git -C "$1" checkout -q --detach FETCH_HEAD',
          'sh',
          tmp,
          url,
          entry.ref,
        ],
        GIT_CLONE_TIMEOUT_MS,
      );
      if (!result.ok) {
        commitFetchError = result;
        await run(['rm', '-rf', '--', tmp]);
        result = await cloneNamedRef(run, url, tmp, entry.ref);
      }
    } else {
      result = await cloneNamedRef(run, url, tmp, entry.ref);
    }
    if (!result.ok) {
      const failed = commitFetchError ?? result;
      const why = failed.timedOut ? `timed out after ${GIT_CLONE_TIMEOUT_MS / 1000}s` : failed.stderr.trim().slice(-2000) || `exit ${failed.exitCode}`;
      throw new SandboxGitCloneError(
        `Failed to materialize git_repo entry ${entry.repo}: git could not clone ${url}${entry.ref ? ` at ${entry.ref}` : ''} inside the sandbox ` +
          `(the sandbox reaches only the hosts its network policy allows): ${why}`,
        { ...details, url, stderr: failed.stderr.slice(-4000), exitCode: failed.exitCode },
      );
    }

    let source = tmp;
    let kind: 'dir' | 'file' = 'dir';
    if (entry.subpath) {
      source = `${tmp}/${entry.subpath}`;
      const cloneRoot = await ctx.realpath(tmp);
      const resolved = await ctx.realpath(source);
      if (!isUnder(resolved, cloneRoot) || resolved === cloneRoot) {
        throw new SandboxGitSubpathError(`git_repo subpath escapes the cloned repository: ${entry.subpath}`, {
          ...details,
          reason: 'escapes_repository',
        });
      }
      let st: FileStat | undefined;
      try {
        st = await ctx.sbx.files.stat(resolved);
      } catch {
        st = undefined;
      }
      if (!st || (st.kind !== 'dir' && st.kind !== 'file')) {
        throw new SandboxGitSubpathError(`git_repo subpath must resolve to a file or directory: ${entry.subpath}`, {
          ...details,
          reason: st ? 'not_file_or_directory' : 'not_found',
        });
      }
      source = resolved;
      kind = st.kind;
    }

    const copy =
      kind === 'dir'
        ? await run(['sh', '-c', 'mkdir -p -- "$2" && cp -R -- "$1/." "$2/"', 'sh', source, destination], GIT_CLONE_TIMEOUT_MS)
        : await run(['sh', '-c', 'mkdir -p -- "$(dirname -- "$2")" && cp -- "$1" "$2"', 'sh', source, destination]);
    if (!copy.ok) {
      throw new SandboxGitCopyError(`Failed to copy git_repo entry ${entry.repo} to ${destination}: ${copy.stderr.trim().slice(-2000)}`, {
        ...details,
        destination,
        stderr: copy.stderr.slice(-4000),
      });
    }
    return kind;
  } finally {
    await run(['rm', '-rf', '--', tmp]).catch(() => undefined);
  }
}

function cloneNamedRef(run: (argv: string[], timeoutMs?: number) => Promise<ExecResult>, url: string, tmp: string, ref: string | undefined) {
  return run(['git', 'clone', '-q', '--depth', '1', ...(ref ? ['--branch', ref] : []), '--', url, tmp], GIT_CLONE_TIMEOUT_MS);
}

/** The sandbox's image, when its manifest names one (for the error's details). */
function imageOf(sbx: Sandbox): { image?: unknown } {
  const image = (sbx.info.manifest as { image?: unknown } | undefined)?.image;
  return image !== undefined ? { image } : {};
}
