// Ported from openai-agents-js packages/agents-core/test/sandboxes/docker.test.ts
// (MIT, see README.md): the Docker construction is replaced by the stasis
// provider; removing a container becomes destroying the sandbox, removing
// the bind-mounted workspace directory has no counterpart (the destroyed
// sandbox took its workspace with it). Every behavioural assertion is kept.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { Manifest, NoopSnapshotSpec, inContainerMountStrategy } from '@openai/agents/sandbox';
import {
  ONE_BY_ONE_PNG,
  box,
  destroyAll,
  removeWorkspace,
  stasisSandboxClient,
  waitForOutputContaining,
  writeUntilExit,
} from './harness.js';

afterAll(destroyAll);

describe('StasisSandboxClient (Docker suite)', () => {
  let rootDir: string | undefined;

  afterEach(async () => {
    if (rootDir) await rm(rootDir, { recursive: true, force: true });
  });

  it('rejects custom command mount credential exposure before Docker side effects', async () => {
    rootDir = await mkdtemp(join(tmpdir(), 'agents-core-docker-sandbox-test-'));
    const client = stasisSandboxClient();
    await expect(
      client.create(
        new Manifest({
          entries: {
            mounted: {
              type: 'mount',
              source: 'memory://initial',
              mountStrategy: inContainerMountStrategy({ pattern: { type: 'fuse', command: 'custom-mount' } }),
            },
          },
        }).withInContainerMountCredentialExposureAcknowledged('mounted'),
      ),
    ).rejects.toThrow(/SDK-supported strategy/u);
  });

  it('runs workspace commands, apply_patch, view_image, interactive stdin, and restore via snapshot', async () => {
    rootDir = await mkdtemp(join(tmpdir(), 'agents-core-docker-sandbox-test-'));
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        entries: { 'notes.txt': { type: 'file', content: 'hello docker\n' }, 'pixel.png': { type: 'file', content: ONE_BY_ONE_PNG } },
      }),
      { snapshot: { type: 'local', baseDir: rootDir } },
    );
    const output = await session.execCommand({ cmd: 'cat notes.txt' });
    expect(output).toContain('Process exited with code 0');
    expect(output).toContain('hello docker');
    await session.applyManifest(new Manifest({ environment: { TOKEN: 'updated', EXTRA: 'present' } }));
    const envOutput = await session.execCommand({ cmd: 'printf "%s:%s\\n" "$TOKEN" "$EXTRA"' });
    expect(envOutput).toContain('updated:present');
    await session.createEditor().updateFile({ type: 'update_file', path: 'notes.txt', diff: '@@\n-hello docker\n+after\n' });
    const patchedOutput = await session.execCommand({ cmd: 'cat notes.txt' });
    const image = await session.viewImage({ path: 'pixel.png' });
    expect(patchedOutput).toContain('after');
    expect(image).toMatchObject({ type: 'image', image: { data: expect.any(Uint8Array), mediaType: 'image/png' } });
    const started = await session.execCommand({ cmd: 'printf "ready\\n"; read value; printf "%s\\n" "$value"', tty: true, yieldTimeMs: 0 });
    const sessionId = Number(started.match(/Process running with session ID (\d+)/)?.[1]);
    // Upstream's helper asserts it saw the prompt.
    expect(await waitForOutputContaining(session, sessionId, 'ready')).toContain('ready');
    const finished = await writeUntilExit(session, sessionId, 'hello stdin\n');
    expect(started).toContain('Process running with session ID');
    expect(finished).toContain('Process exited with code 0');
    expect(finished).toContain('hello stdin');
    const serialized = await client.serializeSessionState(session.state);
    await removeWorkspace(session);
    const reattached = await client.resume(await client.deserializeSessionState(serialized));
    const resumedOutput = await reattached.execCommand({ cmd: 'cat notes.txt' });
    expect(resumedOutput).toContain('after');
    const priorSandbox = reattached.state.sandboxId;
    await removeWorkspace(reattached);
    const restored = await client.resume(await client.deserializeSessionState(serialized));
    const restoredOutput = await restored.execCommand({ cmd: 'cat notes.txt' });
    expect(restored.state.sandboxId).not.toBe(priorSandbox);
    expect(restored.state.snapshotSpec).toEqual({ type: 'local', baseDir: rootDir });
    expect(restoredOutput).toContain('after');
  });

  it('reuses a running container when bind mount authority is unchanged', async () => {
    rootDir = await mkdtemp(join(tmpdir(), 'agents-core-docker-sandbox-test-'));
    const sharedPath = join(rootDir, 'shared');
    const client = stasisSandboxClient({ snapshot: new NoopSnapshotSpec() });
    const session = await client.create(new Manifest({ extraPathGrants: [{ path: sharedPath, readOnly: true }] }));
    await box(session).mkdir(sharedPath);
    await session.execCommand({ cmd: 'printf retained > /tmp/container-only-state' });
    const serialized = await client.serializeSessionState(session.state);
    const resumed = await client.resume(await client.deserializeSessionState(JSON.parse(JSON.stringify(serialized)) as Record<string, unknown>));
    expect(resumed.state.sandboxId).toBe(session.state.sandboxId);
    expect(await resumed.execCommand({ cmd: 'cat /tmp/container-only-state' })).toContain('retained');
  });
});
