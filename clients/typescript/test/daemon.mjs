// Test harness: the real `stasis` daemon on a temporary data dir, on
// loopback, once per backend: `process` always, `microvm` when
// STASIS_IMAGE_DIR names a guest image (the daemon gets its parent as the
// images directory). The binary is $STASIS_BIN, else <repo>/target/debug/stasis.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const HERE = dirname(fileURLToPath(import.meta.url));
export const PKG = resolve(HERE, '..');
export const REPO = resolve(PKG, '..', '..');

export function stasisBin() {
  const b = process.env.STASIS_BIN || join(REPO, 'target', 'debug', 'stasis');
  if (!existsSync(b)) throw new Error(`stasis binary not found at ${b} (build it, or set STASIS_BIN)`);
  return b;
}

/**
 * The microVM backend runs a bounded subset in CI (a VM per sandbox under
 * TCG is slow); STASIS_TS_TESTS_FULL=1 runs everything on it too.
 */
export const FULL = process.env.STASIS_TS_TESTS_FULL === '1';
export const onlyFullOnMicrovm = (backend) =>
  backend === 'microvm' && !FULL ? 'on microvm only with STASIS_TS_TESTS_FULL=1' : false;

/** The backends to test: process always, microvm with a guest image. */
export function backends() {
  const out = ['process'];
  const img = process.env.STASIS_IMAGE_DIR;
  if (img && existsSync(img)) out.push('microvm');
  return out;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Daemon {
  /** `extraArgs`: more `stasis serve` flags (e.g. `--allow-mount DIR`). */
  constructor(backend = 'process', extraArgs = []) {
    this.backend = backend;
    this.extraArgs = extraArgs;
    this.dir = mkdtempSync(join(tmpdir(), 'stasis-ts-'));
    this.cgroupParent = `stasis-ts-${process.pid}-${Math.random().toString(16).slice(2, 8)}`;
    this.url = '';
    this.proc = undefined;
  }

  async start() {
    const ready = join(this.dir, 'ready');
    const log = openSync(join(this.dir, 'daemon.log'), 'a');
    const args = [
      'serve',
      '--data-dir', this.dir,
      '--listen', '127.0.0.1:0',
      '--insecure-dev-key',
      '--accel', this.backend === 'microvm' ? (process.env.STASIS_ACCEL ?? 'auto') : 'tcg',
      '--ready-file', ready,
      '--cgroup-parent', this.cgroupParent,
      '--default-backend', this.backend,
      ...this.extraArgs,
    ];
    if (this.backend === 'microvm') args.push('--images', dirname(resolve(process.env.STASIS_IMAGE_DIR)));
    this.proc = spawn(stasisBin(), args, { stdio: ['ignore', log, log], env: { ...process.env, RUST_LOG: 'info' } });
    let exited = null;
    this.proc.on('exit', (code) => (exited = code));
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (existsSync(ready)) {
        const addr = readFileSync(ready, 'utf8').trim();
        if (addr) {
          this.url = `http://${addr}`;
          break;
        }
      }
      if (exited !== null) throw new Error(`daemon exited ${exited}: ${this.log()}`);
      if (Date.now() > deadline) throw new Error(`daemon did not start: ${this.log()}`);
      await sleep(50);
    }
    for (;;) {
      try {
        if ((await fetch(`${this.url}/healthz`)).ok) break;
      } catch {
        /* not yet */
      }
      if (Date.now() > deadline) throw new Error(`daemon does not answer: ${this.log()}`);
      await sleep(50);
    }
    return this;
  }

  get tokenFile() {
    const p = join(this.dir, 'token');
    return existsSync(p) ? p : undefined;
  }

  /** Connection options for the client. */
  conn() {
    return { baseUrl: this.url, ...(this.tokenFile ? { tokenFile: this.tokenFile } : {}) };
  }

  /** Environment for a child process using the client's defaults. */
  env() {
    const e = { STASIS_URL: this.url };
    if (this.tokenFile) e.STASIS_TOKEN_FILE = this.tokenFile;
    return e;
  }

  log() {
    try {
      return readFileSync(join(this.dir, 'daemon.log'), 'utf8').slice(-4000);
    } catch {
      return '';
    }
  }

  async stop() {
    if (this.proc && this.proc.exitCode === null) {
      const done = new Promise((r) => this.proc.once('exit', r));
      this.proc.kill('SIGTERM');
      const t = setTimeout(() => this.proc.kill('SIGKILL'), 60_000);
      await done;
      clearTimeout(t);
    }
    cleanupCgroups(this.cgroupParent);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Kill whatever is left in this daemon's cgroups and remove them. */
function cleanupCgroups(parent) {
  const roots = ['memory', 'pids', 'cpu', 'cpuacct', 'freezer', 'cpu,cpuacct', 'unified'].map((c) => join('/sys/fs/cgroup', c));
  if (existsSync('/sys/fs/cgroup/cgroup.controllers')) roots.push('/sys/fs/cgroup');
  for (const root of roots) {
    const top = join(root, parent);
    if (!existsSync(top)) continue;
    const dirs = [];
    const walk = (d) => {
      dirs.push(d);
      for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
    };
    try {
      walk(top);
    } catch {
      continue;
    }
    for (const d of dirs) {
      for (const [f, v] of [['freezer.state', 'THAWED'], ['cgroup.freeze', '0']]) {
        try {
          writeFileSync(join(d, f), v);
        } catch {
          /* absent */
        }
      }
      try {
        for (const pid of readFileSync(join(d, 'cgroup.procs'), 'utf8').split(/\s+/).filter(Boolean)) {
          try {
            process.kill(Number(pid), 'SIGKILL');
          } catch {
            /* gone */
          }
        }
      } catch {
        /* absent */
      }
    }
    for (const d of dirs.reverse()) {
      try {
        rmdirSync(d);
      } catch {
        /* busy or gone */
      }
    }
  }
}

/** Start one daemon per backend, hand it to `fn`, stop it after. */
export async function withDaemons(t, fn) {
  for (const backend of backends()) {
    await t.test(backend, async (t2) => {
      const d = await new Daemon(backend).start();
      try {
        await fn(t2, d);
      } finally {
        await d.stop();
      }
    });
  }
}
