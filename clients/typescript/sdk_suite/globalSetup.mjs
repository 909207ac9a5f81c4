// One real stasis daemon for the whole run, on the backend named by
// STASIS_SDK_SUITE_BACKEND (process by default); the tests reach it through
// `inject('stasis')`.
//
// git.test.ts's repositories are served to the sandboxes from this machine's
// loopback: upstream's file:// fixtures are out of a sandbox's reach. A
// `git daemon` serves a temporary directory on 127.0.0.1:PORT, and the
// stasis daemon opens that one port to sandboxes whose network policy allows
// it (`--egress-expose`); `inject('git')` names the directory and the port.
// Without git on this machine there is no fixture server (`git` is null).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemon } from '../test/daemon.mjs';

let daemon;
let gitServer;

export async function setup(project) {
  const backend = process.env.STASIS_SDK_SUITE_BACKEND || 'process';
  const git = await startGitServer();
  daemon = await new Daemon(backend, git ? ['--egress-expose', `127.0.0.1:${git.port}`] : []).start();
  project.provide('stasis', { backend, ...daemon.conn() });
  project.provide('git', git ? { base: git.base, port: git.port } : null);
}

export async function teardown() {
  await daemon?.stop();
  if (gitServer) {
    if (gitServer.proc.exitCode === null) {
      const done = new Promise((r) => gitServer.proc.once('exit', r));
      gitServer.proc.kill('SIGTERM');
      await done;
    }
    rmSync(gitServer.base, { recursive: true, force: true });
  }
}

/** `git daemon` exporting every repository under a new temporary directory, on a free loopback port. */
async function startGitServer() {
  if (spawnSync('git', ['--version']).status !== 0) return null;
  const base = mkdtempSync(join(tmpdir(), 'stasis-sdk-suite-git-'));
  const port = await freePort();
  const proc = spawn(
    'git',
    ['daemon', '--reuseaddr', '--export-all', `--base-path=${base}`, '--listen=127.0.0.1', `--port=${port}`, base],
    { stdio: 'ignore' },
  );
  gitServer = { proc, base, port };
  const deadline = Date.now() + 20_000;
  while (!(await listening(port))) {
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`git daemon did not listen on 127.0.0.1:${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return gitServer;
}

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

function listening(port) {
  return new Promise((resolve) => {
    const c = createConnection({ host: '127.0.0.1', port });
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}
