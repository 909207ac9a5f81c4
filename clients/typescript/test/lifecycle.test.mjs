// The provider's session lifecycle as the SDK's runtime drives it (pre-stop
// hooks, stop, shutdown) and its resume validation, against a live daemon
// (process backend: the behaviour is the client's).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { Manifest, SandboxConfigurationError, SandboxUnsupportedFeatureError } from '@openai/agents/sandbox';

import { StasisClient } from '../dist/index.js';
import { StasisSandboxClient } from '../dist/agents/index.js';
import { Daemon } from './daemon.mjs';

describe('agents provider lifecycle (process)', { timeout: 600_000 }, () => {
  let d;
  let api;
  let shared;
  before(async () => {
    shared = mkdtempSync(join(tmpdir(), 'stasis-ts-bind-'));
    d = await new Daemon('process', ['--allow-mount', shared]).start();
    api = new StasisClient(d.conn());
  });
  after(async () => {
    for (const s of await api.list().catch(() => [])) {
      if (!['destroyed', 'failed'].includes(s.state)) await s.destroy().catch(() => undefined);
    }
    await d.stop();
    rmSync(shared, { recursive: true, force: true });
  });

  it('binds a local_bind mount read-only and keeps it out of workspace archives; refuses a read-write one', async () => {
    writeFileSync(join(shared, 'input.txt'), 'mounted\n');
    const provider = new StasisSandboxClient(d.conn());
    const bind = (readOnly) => ({ type: 'mount', source: shared, readOnly, mountPath: 'mounted/external', mountStrategy: { type: 'local_bind' } });
    await assert.rejects(
      provider.create(new Manifest({ entries: { external: bind(false) } })),
      (e) => e instanceof SandboxUnsupportedFeatureError && /read-write local_bind/.test(e.message),
    );
    const session = await provider.create(new Manifest({ entries: { external: bind(true), 'keep.txt': { type: 'file', content: 'keep' } } }), {
      onDelete: 'destroy',
    });
    // (The files API does not cross into mounts: commands read them.)
    assert.equal((await session.exec({ cmd: 'cat mounted/external/input.txt' })).output, 'mounted\n');
    const w = await session.exec({ cmd: 'echo x > mounted/external/new.txt' });
    assert.notEqual(w.exitCode, 0);
    const tar = Buffer.from(await session.persistWorkspace()).toString('latin1');
    assert.ok(tar.includes('keep.txt'));
    assert.ok(!tar.includes('input.txt'));
    assert.equal(readFileSync(join(shared, 'input.txt'), 'utf8'), 'mounted\n');
    await session.delete();
  });

  it('runs pre-stop hooks once, while the sandbox runs, then stops and pauses it', async () => {
    const provider = new StasisSandboxClient(d.conn());
    const session = await provider.create(new Manifest());
    const seen = [];
    session.registerPreStopHook(async () => {
      // A capability flushing its state into the workspace before the stop.
      await session.writeFile('flushed.txt', 'yes');
      seen.push((await api.get(session.state.sandboxId)).state);
    });
    const unregistered = session.registerPreStopHook(async () => seen.push('unregistered'));
    unregistered();
    const failing = new Error('hook failed');
    session.registerPreStopHook(async () => {
      throw failing;
    });
    session.registerPreStopHook(async () => seen.push('after the failing one'));
    await assert.rejects(session.runPreStopHooks(), (e) => e === failing);
    assert.deepEqual(seen, ['running', 'after the failing one']);
    await session.runPreStopHooks(); // once per stop
    assert.equal(seen.length, 2);
    await session.stop();
    assert.equal((await api.get(session.state.sandboxId)).state, 'running');
    await session.shutdown();
    assert.equal((await api.get(session.state.sandboxId)).state, 'paused');
    await session.delete(); // safe to repeat
    assert.equal(Buffer.from(await session.readFile({ path: 'flushed.txt' })).toString(), 'yes');
  });

  it('close() runs the pre-stop hooks before the sandbox is paused', async () => {
    const provider = new StasisSandboxClient(d.conn());
    const session = await provider.create(new Manifest());
    let stateAtHook;
    session.registerPreStopHook(async () => {
      stateAtHook = (await api.get(session.state.sandboxId)).state;
    });
    await session.close();
    assert.equal(stateAtHook, 'running');
    assert.equal((await api.get(session.state.sandboxId)).state, 'paused');
  });

  it('validates a session state before a resume', async () => {
    const provider = new StasisSandboxClient(d.conn());
    const session = await provider.create(new Manifest(), { onDelete: 'destroy' });
    const raw = await provider.serializeSessionState(session.state);
    assert.doesNotThrow(() => provider.validateSessionStateForResume({ source: 'runState', state: raw }));
    assert.doesNotThrow(() => provider.validateSessionStateForResume({ source: 'explicit', state: session.state }));
    // Saved against another daemon: refused, not resumed or restored here.
    assert.throws(
      () => provider.validateSessionStateForResume({ source: 'runState', state: { ...raw, baseUrl: 'http://127.0.0.1:1' } }),
      (e) => e instanceof SandboxConfigurationError && /belongs to the daemon at http:\/\/127\.0\.0\.1:1/.test(e.message),
    );
    assert.throws(
      () => provider.validateSessionStateForResume({ source: 'runState', state: { ...raw, sandboxId: '../x' } }),
      SandboxConfigurationError,
    );
    assert.throws(
      () =>
        provider.validateSessionStateForResume({
          source: 'runState',
          state: { ...raw, snapshotSpec: { type: 'remote', id: 'r' } },
        }),
      /remote snapshot spec/,
    );
    await session.delete();
  });
});
