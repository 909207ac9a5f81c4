// `npm pack` output installs into a fresh project and runs the README example.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';

import { Daemon, PKG } from './daemon.mjs';

const run = promisify(execFile);

/** The first ```ts block of the README after the "Quick start" heading. */
function readmeExample() {
  const text = readFileSync(join(PKG, 'README.md'), 'utf8');
  const at = text.indexOf('## Quick start');
  const m = /```ts\n([\s\S]*?)```/.exec(text.slice(at));
  assert.ok(at >= 0 && m, 'README.md has a Quick start ts example');
  return m[1];
}

describe('npm pack', () => {
  let d;
  let dir;
  before(async () => {
    d = await new Daemon('process').start();
    dir = mkdtempSync(join(tmpdir(), 'stasis-ts-pack-'));
  });
  after(async () => {
    await d.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('installs into a fresh project and runs the README example', async () => {
    const { stdout } = await run('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: PKG, timeout: 300_000 });
    const tgz = join(dir, stdout.trim().split('\n').at(-1));
    const app = join(dir, 'app');
    await run('mkdir', ['-p', app]);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '0.0.0', type: 'module', private: true }));
    await run('npm', ['install', '--no-audit', '--no-fund', '--offline', tgz], { cwd: app, timeout: 300_000 }).catch(
      async () => run('npm', ['install', '--no-audit', '--no-fund', tgz], { cwd: app, timeout: 300_000 }),
    );
    // The example in TypeScript source is also valid JavaScript once its type annotations are gone.
    writeFileSync(join(app, 'example.mjs'), readmeExample());
    const { stdout: out } = await run(process.execPath, ['example.mjs'], {
      cwd: app,
      env: { ...process.env, ...d.env() },
      timeout: 300_000,
    });
    assert.match(out, /hello from stasis/);
    assert.match(out, /sb-/);
  });
});
