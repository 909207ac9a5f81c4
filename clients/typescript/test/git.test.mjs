// `git_repo` manifest entries through the Agents SDK provider: cloned inside
// the sandbox, through its egress policy. The repository is served by
// `git daemon` on this machine's loopback (no public Internet): the daemon
// exposes that one port to sandboxes (`--egress-expose`), a sandbox's policy
// allows it, and git's configuration in the SDK manifest's environment sends
// the entry's https://git.fixture.test/... URL there (`url.<base>.insteadOf`).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import {
  Manifest,
  SandboxGitCloneError,
  SandboxGitMissingInImageError,
  SandboxGitSubpathError,
  SandboxInvalidManifestPathError,
} from '@openai/agents/sandbox';

import { StasisClient } from '../dist/index.js';
import { StasisSandboxClient } from '../dist/agents/index.js';
import { Daemon, backends } from './daemon.mjs';

const HOST = 'git.fixture.test';
const OPTIONS = { manifest: { lifecycle: { idle_timeout_secs: 600 } }, onDelete: 'destroy', recordRun: false };

const git = (cwd, ...args) =>
  execFileSync('git', args, {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' },
  }).trim();

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const listening = (port) =>
  new Promise((resolve) => {
    const c = createConnection({ host: '127.0.0.1', port });
    c.once('connect', () => (c.destroy(), resolve(true)));
    c.once('error', () => resolve(false));
  });

/** git's own configuration through the environment: https://git.fixture.test/... goes to the fixture server. */
const gitEnvironment = (port) => ({
  GIT_CONFIG_COUNT: '1',
  GIT_CONFIG_KEY_0: `url.git://127.0.0.1:${port}/.insteadOf`,
  GIT_CONFIG_VALUE_0: `https://${HOST}/`,
});

describe('agents provider git_repo entries', { timeout: 900_000 }, () => {
  let root;
  let server;
  let port;
  let first;
  let head;
  before(async () => {
    // A bare repository team/proj.git, branch main with two commits; the
    // second adds a symlink pointing out of the repository.
    root = mkdtempSync(join(tmpdir(), 'stasis-ts-git-'));
    const work = join(root, 'work');
    mkdirSync(join(work, 'pkg'), { recursive: true });
    git(work, 'init', '-q', '-b', 'main');
    writeFileSync(join(work, 'README.md'), 'fixture readme v1\n');
    writeFileSync(join(work, 'pkg', 'module.py'), "VALUE = 'v1'\n");
    git(work, 'add', '.');
    git(work, 'commit', '-q', '-m', 'one');
    first = git(work, 'rev-parse', 'HEAD');
    writeFileSync(join(work, 'README.md'), 'fixture readme v2\n');
    symlinkSync('/etc', join(work, 'outside'));
    git(work, 'add', '.');
    git(work, 'commit', '-q', '-m', 'two');
    head = git(work, 'rev-parse', 'HEAD');
    git(root, 'clone', '-q', '--bare', work, join(root, 'team', 'proj.git'));
    port = await freePort();
    server = spawn('git', ['daemon', '--reuseaddr', '--export-all', `--base-path=${root}`, '--listen=127.0.0.1', `--port=${port}`, root], {
      stdio: 'ignore',
    });
    const deadline = Date.now() + 20_000;
    while (!(await listening(port))) {
      assert.ok(server.exitCode === null && Date.now() < deadline, 'git daemon did not listen');
      await new Promise((r) => setTimeout(r, 50));
    }
  });
  after(async () => {
    if (server && server.exitCode === null) {
      const done = new Promise((r) => server.once('exit', r));
      server.kill('SIGTERM');
      await done;
    }
    rmSync(root, { recursive: true, force: true });
  });

  for (const backend of backends()) {
    describe(backend, () => {
      let d;
      let api;
      before(async () => {
        d = await new Daemon(backend, ['--egress-expose', `127.0.0.1:${port}`]).start();
        api = new StasisClient(d.conn());
      });
      after(async () => {
        for (const s of await api.list().catch(() => [])) {
          if (!['destroyed', 'failed'].includes(s.state)) await s.destroy().catch(() => undefined);
        }
        await d.stop();
      });
      const allowed = () => ({ ...OPTIONS, manifest: { ...OPTIONS.manifest, backend, network: { allow: [`127.0.0.1:${port}`] } } });

      it('clones branches, commits and subpaths inside the sandbox through its egress policy', async (t) => {
        const provider = new StasisSandboxClient(d.conn());
        const manifest = new Manifest({
          entries: {
            repo: { type: 'git_repo', host: HOST, repo: 'team/proj', ref: 'main' },
            old: { type: 'git_repo', host: HOST, repo: 'team/proj', ref: first },
            nested: { type: 'dir', children: { pkg: { type: 'git_repo', host: HOST, repo: 'team/proj', ref: 'main', subpath: 'pkg' } } },
            'docs/README.md': { type: 'git_repo', host: HOST, repo: 'team/proj', subpath: 'README.md' },
          },
          environment: gitEnvironment(port),
        });
        let session;
        try {
          session = await provider.create({ manifest, options: allowed() });
        } catch (e) {
          if (e instanceof SandboxGitMissingInImageError) return t.skip(`the ${backend} sandbox's image has no git`);
          throw e;
        }
        const read = async (p) => Buffer.from(await session.readFile({ path: p })).toString();
        assert.equal(await read('repo/README.md'), 'fixture readme v2\n');
        assert.equal(await read('repo/pkg/module.py'), "VALUE = 'v1'\n");
        assert.equal(await read('old/README.md'), 'fixture readme v1\n');
        assert.equal(await read('nested/pkg/module.py'), "VALUE = 'v1'\n");
        assert.equal(await read('docs/README.md'), 'fixture readme v2\n');
        // A clone keeps its history (its .git); a subpath is that part of the tree only.
        const r = await session.exec({ cmd: 'git -C repo rev-parse HEAD; git -C old rev-parse HEAD; test ! -e nested/pkg/README.md && test ! -e nested/pkg/.git && echo only-pkg' });
        assert.equal(r.exitCode, 0, r.output);
        assert.deepEqual(r.output.split(/\s+/).filter(Boolean), [head, first, 'only-pkg']);
        // The entry's directory gets the SDK's default entry mode; nothing is left in /tmp.
        assert.equal((await session.sandbox.files.stat('/workspace/repo')).mode, 0o755);
        assert.equal((await session.sandbox.exec(['sh', '-c', 'ls -a /tmp | grep -c stasis-git || true'])).stdout.trim(), '0');
        // An entry materialized later (the SDK's skills do this) is cloned the same way and joins the manifest.
        await session.materializeEntry({ path: 'later', entry: { type: 'git_repo', host: HOST, repo: 'team/proj', ref: first } });
        assert.equal(await read('later/README.md'), 'fixture readme v1\n');
        assert.ok(Object.keys(session.state.manifest.entries).includes('later'));
      });

      it('fails with the SDK errors: no route, no git, a bad subpath', { skip: backend !== 'process' && 'the behaviour is the client\'s' }, async () => {
        const provider = new StasisSandboxClient(d.conn());
        const entry = { type: 'git_repo', host: HOST, repo: 'team/proj', ref: 'main' };
        const before = (await api.list()).filter((s) => !['destroyed', 'failed'].includes(s.state)).length;
        // The policy does not allow the fixture server: git cannot reach it.
        await assert.rejects(
          provider.create({ manifest: new Manifest({ entries: { repo: entry }, environment: gitEnvironment(port) }), options: OPTIONS }),
          (e) => {
            assert.ok(e instanceof SandboxGitCloneError, String(e));
            assert.equal(e.code, 'git_clone_error');
            assert.match(e.message, /team\/proj/);
            assert.match(e.message, /network policy/);
            assert.equal(e.details.url, `https://${HOST}/team/proj.git`);
            return true;
          },
        );
        // No git on the sandbox's PATH.
        await assert.rejects(
          provider.create({ manifest: new Manifest({ entries: { repo: entry }, environment: { PATH: '/nonexistent' } }), options: allowed() }),
          SandboxGitMissingInImageError,
        );
        // A subpath leading out of the clone through a symlink, one that is not there, one the SDK refuses outright.
        for (const subpath of ['outside', 'outside/passwd', 'missing']) {
          await assert.rejects(
            provider.create({ manifest: new Manifest({ entries: { repo: { ...entry, subpath } }, environment: gitEnvironment(port) }), options: allowed() }),
            (e) => e instanceof SandboxGitSubpathError && e.code === 'git_subpath_error',
            subpath,
          );
        }
        assert.throws(() => new Manifest({ entries: { repo: { ...entry, subpath: '../x' } } }), SandboxGitSubpathError);
        // A failed create leaves no sandbox behind.
        assert.equal((await api.list()).filter((s) => !['destroyed', 'failed'].includes(s.state)).length, before);
        // A destination leading out of the workspace through a symlink is refused before anything is cloned.
        const session = await provider.create({ manifest: new Manifest(), options: allowed() });
        assert.ok((await session.sandbox.exec(['ln', '-s', '/tmp', '/workspace/link'])).ok);
        await assert.rejects(
          session.materializeEntry({ path: 'link/repo', entry }),
          SandboxInvalidManifestPathError,
        );
      });
    });
  }
});
