// Ported from openai-agents-js packages/agents-core/test/sandboxes/unixLocal.git.test.ts
// (MIT, see README.md): the UnixLocal construction is replaced by the
// stasis provider. The provider clones `git_repo` entries inside the
// sandbox, through its egress policy (docs/src/agents-sdk.md), so the
// repositories, made on this machine as upstream makes them, are served to
// the sandbox instead of named by file:// URLs a sandbox cannot reach: they
// are made under the directory a loopback `git daemon` exports
// (globalSetup.mjs), named by their git://127.0.0.1:PORT/... URL, and the
// sandbox's network policy allows that one address. Every behavioural
// assertion is kept.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { Manifest } from '@openai/agents/sandbox';
import { destroyAll, stasisSandboxClient as harnessClient } from './harness.js';

const execFileAsync = promisify(execFile);

afterAll(destroyAll);

const GIT = inject('git');

/** The URL a sandbox clones a fixture repository from (upstream: `file://${repository}`). */
function served(repository: string): string {
  return `git://127.0.0.1:${GIT!.port}/${relative(GIT!.base, repository)}`;
}

/** The provider, with a network policy that lets the sandbox reach the fixture server. */
function stasisSandboxClient() {
  return harnessClient({ manifest: { network: { allow: [`127.0.0.1:${GIT!.port}`] } } });
}

describe.skipIf(!GIT)('StasisSandboxClient git repository entries (UnixLocal suite)', () => {
  let rootDir: string;

  beforeEach(async () => {
    rootDir = await mkdtemp(join(GIT!.base, 'agents-core-sandbox-test-'));
  });

  afterEach(async () => {
    await rm(rootDir, { recursive: true, force: true });
  });

  it('creates parent directories before cloning nested git repositories', async () => {
    const repository = join(rootDir, 'source-repo');
    await mkdir(repository, { recursive: true });
    await createGitRepository(repository, 'nested repo\n');
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ entries: { 'deps/app': { type: 'git_repo', repo: served(repository) } } }));
    expect(await session.pathExists('deps/app/README.md')).toBe(true);
  });

  it('treats empty git repository subpaths as the repository root', async () => {
    const repository = join(rootDir, 'empty-subpath-repo');
    await mkdir(repository, { recursive: true });
    await createGitRepository(repository, 'repo root\n');
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ entries: { app: { type: 'git_repo', repo: served(repository), subpath: '' } } }));
    const output = await session.execCommand({ cmd: 'cat /workspace/app/README.md', shell: '/bin/sh', login: false, yieldTimeMs: 2_000 });
    expect(output).toContain('repo root');
  });

  it('checks out commit SHA refs when cloning git repositories', async () => {
    const repository = join(rootDir, 'commit-repo');
    await mkdir(repository, { recursive: true });
    await createGitRepository(repository, 'commit ref\n');
    const { stdout: commitSha } = await execFileAsync('git', ['rev-parse', 'HEAD'], { cwd: repository });
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({ entries: { app: { type: 'git_repo', repo: served(repository), ref: commitSha.trim() } } }),
    );
    const output = await session.execCommand({ cmd: 'cat /workspace/app/README.md', shell: '/bin/sh', login: false, yieldTimeMs: 2_000 });
    expect(output).toContain('commit ref');
  });
});

async function createGitRepository(repository: string, readmeContent: string): Promise<void> {
  await execFileAsync('git', ['init'], { cwd: repository });
  await execFileAsync('git', ['config', 'user.email', 'test@example.com'], { cwd: repository });
  await execFileAsync('git', ['config', 'user.name', 'Test User'], { cwd: repository });
  await writeFile(join(repository, 'README.md'), readmeContent, 'utf8');
  await execFileAsync('git', ['add', 'README.md'], { cwd: repository });
  await execFileAsync('git', ['commit', '-m', 'init'], { cwd: repository });
}
