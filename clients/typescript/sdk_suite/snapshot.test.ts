// Ported from openai-agents-js packages/agents-core/test/sandboxes/unixLocal.test.ts
// (the snapshot, serialization and resume tests; MIT, see README.md): the
// UnixLocal construction is replaced by the stasis provider. Where upstream
// removes the workspace directory the sandbox is destroyed; where it stats a
// local snapshot's tree, the snapshot's archive is read (snapshotMember).
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EnvValueReference, InMemoryRemoteSnapshotStore, Manifest, NoopSnapshotSpec, registerEnvValueReference } from '@openai/agents/sandbox';
import { box, collectActiveCommandOutput, destroyAll, removeWorkspace, snapshotMember, stasisSandboxClient } from './harness.js';

afterAll(destroyAll);

describe('StasisSandboxClient snapshots (UnixLocal suite)', () => {
  let rootDir: string;

  beforeEach(async () => {
    rootDir = await mkdtemp(join(tmpdir(), 'agents-core-sandbox-test-'));
  });

  afterEach(async () => {
    await rm(rootDir, { recursive: true, force: true });
  });

  it('reattaches to a live workspace and falls back to a local snapshot restore', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ entries: { 'notes.txt': { type: 'file', content: 'before\n' } } }), {
      snapshot: { type: 'local', baseDir: rootDir },
    });
    await session.createEditor().updateFile({ type: 'update_file', path: 'notes.txt', diff: '@@\n-before\n+after\n' });
    const serialized = await client.serializeSessionState(session.state);
    const reattached = await client.resume(await client.deserializeSessionState(serialized));
    const reattachedOutput = await reattached.execCommand({ cmd: 'cat notes.txt', shell: '/bin/sh', login: false, yieldTimeMs: 500 });
    const completedReattachedOutput = await collectActiveCommandOutput(reattached, reattachedOutput);
    expect(completedReattachedOutput).toContain('after');
    const priorSandbox = session.state.sandboxId;
    await removeWorkspace(session);
    const restored = await client.resume(await client.deserializeSessionState(serialized));
    const restoredOutput = await restored.execCommand({ cmd: 'cat notes.txt', shell: '/bin/sh', login: false, yieldTimeMs: 500 });
    const completedRestoredOutput = await collectActiveCommandOutput(restored, restoredOutput);
    expect(restored.state.sandboxId).not.toBe(priorSandbox);
    expect(restored.state.snapshotSpec).toEqual({ type: 'local', baseDir: rootDir });
    expect(completedRestoredOutput).toContain('after');
  });

  it('restores a local snapshot over a drifted live workspace', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ entries: { 'notes.txt': { type: 'file', content: 'before\n' } } }), {
      snapshot: { type: 'local', baseDir: rootDir },
    });
    await session.createEditor().updateFile({ type: 'update_file', path: 'notes.txt', diff: '@@\n-before\n+snapshot\n' });
    const serialized = await client.serializeSessionState(session.state);
    expect(serialized.snapshotFingerprint).toEqual(expect.any(String));
    expect(serialized.snapshotFingerprintVersion).toBe('workspace_tree_sha256_v1');
    await box(session).writeFile('/workspace/notes.txt', 'drifted\n');
    const restored = await client.resume(await client.deserializeSessionState(serialized));
    const initialRestoredOutput = await restored.execCommand({ cmd: 'cat notes.txt', shell: '/bin/sh', login: false, yieldTimeMs: 500 });
    const restoredOutput = await collectActiveCommandOutput(restored, initialRestoredOutput);
    expect(restored.state.sandboxId).toBe(session.state.sandboxId);
    expect(restoredOutput).toContain('snapshot');
    expect(restoredOutput).not.toContain('drifted');
  });

  it('serializes persistent state without ephemeral manifest data', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        entries: {
          'keep.txt': { type: 'file', content: 'keep\n' },
          'tmp.txt': { type: 'file', content: 'tmp\n', ephemeral: true },
          dir: { type: 'dir', children: { 'nested.tmp': { type: 'file', content: 'nested\n', ephemeral: true } } },
        },
        environment: { KEEP_ENV: 'keep', SECRET_ENV: { value: 'secret', ephemeral: true } },
      }),
      { snapshot: { type: 'local', baseDir: rootDir } },
    );
    session.state.environment.KEEP_ENV = 'runtime-keep';
    session.state.environment.RUNTIME_ENV = 'runtime-only';
    session.state.environment.SECRET_ENV = 'runtime-secret';
    const firstSerialized = await client.serializeSessionState(session.state);
    const firstSnapshot = firstSerialized.snapshot as { type: 'local'; path: string };
    await expect(snapshotMember(firstSnapshot.path, 'keep.txt')).resolves.toBeTruthy();
    const serialized = await client.serializeSessionState(session.state);
    const serializedManifest = serialized.manifest as Manifest;
    const snapshot = serialized.snapshot as { type: 'local'; path: string };
    expect(serializedManifest.entries).toHaveProperty('keep.txt');
    expect(serializedManifest.entries).toHaveProperty('dir');
    expect(serializedManifest.entries).not.toHaveProperty('tmp.txt');
    expect((serializedManifest.entries.dir as { children: Record<string, unknown> }).children).not.toHaveProperty('nested.tmp');
    expect(serialized.environment).toEqual({ KEEP_ENV: 'runtime-keep', RUNTIME_ENV: 'runtime-only' });
    const resumed = await client.resume(await client.deserializeSessionState(serialized));
    const output = await resumed.execCommand({
      cmd: 'printf "%s:%s:%s\\n" "$KEEP_ENV" "$RUNTIME_ENV" "$SECRET_ENV"',
      shell: '/bin/sh',
      login: false,
      yieldTimeMs: 500,
    });
    expect(output).toContain('runtime-keep:runtime-only:');
    expect(output).not.toContain('runtime-secret');
    expect(snapshot).toMatchObject({ type: 'local' });
    expect(snapshot.path).not.toBe(firstSnapshot.path);
    await expect(stat(firstSnapshot.path)).rejects.toThrow();
    await expect(snapshotMember(snapshot.path, 'keep.txt')).resolves.toBeTruthy();
    await expect(snapshotMember(snapshot.path, 'tmp.txt')).rejects.toThrow();
    await expect(snapshotMember(snapshot.path, 'dir/nested.tmp')).rejects.toThrow();
  });

  it('re-resolves registered environment references without persisting secrets', async () => {
    let currentSecret = 'activity-secret';
    class LocalSecretReference extends EnvValueReference {
      static readonly type = 'test.local_secret_reference';
      constructor(readonly key: string) {
        super();
      }
      serialize(): Record<string, unknown> {
        return { key: this.key };
      }
      async resolve(): Promise<string> {
        return `${currentSecret}:${this.key}`;
      }
    }
    const unregister = registerEnvValueReference(LocalSecretReference, (payload) => {
      if (typeof payload.key !== 'string') throw new TypeError('Local secret reference key must be a string.');
      return new LocalSecretReference(payload.key);
    });
    try {
      const client = stasisSandboxClient({ snapshot: { type: 'local', baseDir: rootDir } });
      const session = await client.create(new Manifest({ environment: { TOKEN: new LocalSecretReference('openai-key') } }));
      const serialized = await client.serializeSessionState(session.state);
      const serializedJson = JSON.stringify(serialized);
      expect(serializedJson).not.toContain('activity-secret');
      expect(serialized.manifest).toMatchObject({ environment: { TOKEN: { type: LocalSecretReference.type, key: 'openai-key' } } });
      expect(serialized.environment).toEqual({});
      currentSecret = 'worker-secret';
      const restoredState = await client.deserializeSessionState(JSON.parse(serializedJson));
      expect(restoredState.manifest.environment.TOKEN).toBeInstanceOf(LocalSecretReference);
      expect(restoredState.environment).toEqual({ TOKEN: 'worker-secret:openai-key' });
      const restored = await client.resume(restoredState);
      const output = await restored.execCommand({ cmd: 'printf "%s\\n" "$TOKEN"', shell: '/bin/sh', login: false, yieldTimeMs: 500 });
      expect(output).toContain('worker-secret:openai-key');
    } finally {
      unregister();
    }
  });

  it('excludes an ephemeral root entry from local snapshots', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        entries: {
          '.': {
            type: 'dir',
            ephemeral: true,
            children: {
              'keep.txt': { type: 'file', content: 'skip root\n' },
              dir: { type: 'dir', children: { 'nested.txt': { type: 'file', content: 'skip nested\n' } } },
            },
          },
        },
      }),
      { snapshot: { type: 'local', baseDir: rootDir } },
    );
    const serialized = await client.serializeSessionState(session.state);
    const snapshot = serialized.snapshot as { type: 'local'; path: string };
    await expect(snapshotMember(snapshot.path, 'keep.txt')).rejects.toThrow();
    await expect(snapshotMember(snapshot.path, 'dir')).rejects.toThrow();
  });

  it('uses the stable default local snapshot directory when baseDir is omitted', async () => {
    const originalSnapshotDir = process.env.OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR;
    const snapshotBaseDir = join(rootDir, 'stable-snapshots');
    process.env.OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR = snapshotBaseDir;
    try {
      const client = stasisSandboxClient({ snapshot: { type: 'local' } });
      const session = await client.create(new Manifest({ entries: { 'notes.txt': { type: 'file', content: 'stable\n' } } }));
      const serialized = await client.serializeSessionState(session.state);
      const snapshot = serialized.snapshot as { type: 'local'; path: string };
      expect(snapshot.path.startsWith(`${snapshotBaseDir}/`)).toBe(true);
      await expect(snapshotMember(snapshot.path, 'notes.txt')).resolves.toBe(true);
    } finally {
      if (originalSnapshotDir === undefined) delete process.env.OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR;
      else process.env.OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR = originalSnapshotDir;
    }
  });

  it('does not follow symlinks when creating local snapshots', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ entries: { 'safe.txt': { type: 'file', content: 'safe\n' } } }), {
      snapshot: { type: 'local', baseDir: rootDir },
    });
    await box(session).writeFile('/tmp/host-secret.txt', 'host secret\n');
    await box(session).symlink('/tmp/host-secret.txt', '/workspace/link');
    const serialized = await client.serializeSessionState(session.state);
    const snapshot = serialized.snapshot as { type: 'local'; path: string };
    await expect(snapshotMember(snapshot.path, 'safe.txt')).resolves.toBeTruthy();
    // UnixLocal leaves a link to a host path out of its copy; a stasis
    // archive may keep the link itself (it is restored only in a sandbox,
    // where the archive check refuses links leaving the workspace), but
    // never the content it points at.
    const tar = await import('node:fs/promises').then((fs) => fs.readFile(join(snapshot.path, 'workspace.tar')));
    expect(tar.includes(Buffer.from('host secret'))).toBe(false);
  });

  it('skips and clears local snapshots for noop snapshot specs', async () => {
    const client = stasisSandboxClient({ snapshot: { type: 'local', baseDir: rootDir } });
    const session = await client.create(new Manifest({ entries: { 'notes.txt': { type: 'file', content: 'keep\n' } } }));
    const firstSerialized = await client.serializeSessionState(session.state);
    const firstSnapshot = firstSerialized.snapshot as { type: 'local'; path: string };
    await expect(snapshotMember(firstSnapshot.path, 'notes.txt')).resolves.toBeTruthy();
    session.state.snapshotSpec = new NoopSnapshotSpec();
    const serialized = await client.serializeSessionState(session.state);
    expect(serialized.snapshotSpec).toEqual({ type: 'noop' });
    expect(serialized.snapshot).toBeNull();
    await expect(stat(firstSnapshot.path)).rejects.toThrow();
    await removeWorkspace(session);
    await expect(client.resume(await client.deserializeSessionState(serialized))).rejects.toThrow(/no local snapshot could be restored/);
  });

  it('persists and restores remote snapshots through a snapshot store', async () => {
    const store = new InMemoryRemoteSnapshotStore();
    const client = stasisSandboxClient({ snapshot: { type: 'remote', id: 'remote-snapshot', store } });
    const session = await client.create(
      new Manifest({
        entries: { 'keep.txt': { type: 'file', content: 'keep\n' }, 'skip.txt': { type: 'file', content: 'skip\n', ephemeral: true } },
      }),
    );
    const serialized = JSON.parse(JSON.stringify(await client.serializeSessionState(session.state))) as Record<string, unknown>;
    const snapshot = serialized.snapshot as { type: 'remote'; id: string };
    expect(serialized.snapshotSpec).toEqual({ type: 'remote', id: 'remote-snapshot' });
    await removeWorkspace(session);
    const deserialized = await client.deserializeSessionState(serialized);
    expect((deserialized.snapshotSpec as any)?.store).toBe(store);
    const restored = await client.resume(deserialized);
    expect(snapshot).toEqual({ type: 'remote', id: 'remote-snapshot' });
    await expect(box(restored).readFile('/workspace/keep.txt')).resolves.toBe('keep\n');
    await expect(box(restored).readFile('/workspace/skip.txt')).rejects.toThrow();
  });

  it('applies archive limits before restoring remote snapshots', async () => {
    const store = new InMemoryRemoteSnapshotStore();
    const client = stasisSandboxClient({
      snapshot: { type: 'remote', id: 'remote-snapshot', store },
      archiveLimits: { maxInputBytes: null, maxExtractedBytes: 4, maxMembers: null },
    });
    const session = await client.create(new Manifest({ entries: { 'keep.txt': { type: 'file', content: 'keep\n' } } }));
    const serialized = JSON.parse(JSON.stringify(await client.serializeSessionState(session.state))) as Record<string, unknown>;
    await removeWorkspace(session);
    await expect(client.resume(await client.deserializeSessionState(serialized))).rejects.toMatchObject({
      details: { reason: 'archive extracted size exceeds limit', limit: 4, actual: 5, member: 'keep.txt' },
    });
  });

  it('tears down owned workspaces when the session closes', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    await session.close();
    // The sandbox is gone (onDelete destroy) or paused (the default): never left running.
    expect(await session.running()).toBe(false);
  });
});

describe('StasisSandboxClient snapshots (UnixLocal suite, continued)', () => {
  it('rejects restoring remote snapshots into a symlinked workspace root', async () => {
    const store = new InMemoryRemoteSnapshotStore();
    const client = stasisSandboxClient({ snapshot: { type: 'remote', id: 'remote-snapshot', store } });
    const session = await client.create(new Manifest({ entries: { 'keep.txt': { type: 'file', content: 'keep\n' } } }));
    const serialized = JSON.parse(JSON.stringify(await client.serializeSessionState(session.state))) as Record<string, unknown>;
    const outsideDir = '/tmp/outside-root';
    await box(session).mkdir(outsideDir);
    await box(session).writeFile(`${outsideDir}/outside.txt`, 'outside\n');
    await box(session).rm('/workspace');
    await box(session).symlink(outsideDir, '/workspace');
    await expect(client.resume(await client.deserializeSessionState(serialized))).rejects.toThrow(/snapshot path changed while copying/);
    await expect(box(session).readFile(`${outsideDir}/outside.txt`)).resolves.toBe('outside\n');
    await expect(box(session).readFile(`${outsideDir}/keep.txt`)).rejects.toThrow();
  });
});
