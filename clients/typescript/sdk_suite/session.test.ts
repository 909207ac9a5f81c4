// Ported from openai-agents-js packages/agents-core/test/sandboxes/unixLocal.test.ts
// (MIT, see README.md): the UnixLocal construction is replaced by the stasis
// provider, node:fs on the UnixLocal workspace by the same operation inside
// the sandbox (`box`), host "outside" directories by directories outside the
// workspace inside the sandbox. Every behavioural assertion is kept.
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Manifest, NoopSnapshotSpec, SandboxMountError, inContainerMountStrategy, s3Mount, skills } from '@openai/agents/sandbox';
import {
  ONE_BY_ONE_PNG,
  box,
  collectActiveCommandOutput,
  destroyAll,
  stasisSandboxClient,
  writeUntilExit,
} from './harness.js';

afterAll(destroyAll);

describe('StasisSandboxClient (UnixLocal suite)', () => {
  let rootDir: string;
  let outside: string;

  beforeEach(async () => {
    rootDir = await mkdtemp(join(tmpdir(), 'agents-core-sandbox-test-'));
    outside = `/tmp/outside-${Math.random().toString(16).slice(2, 10)}`;
  });

  afterEach(async () => {
    await rm(rootDir, { recursive: true, force: true });
  });

  it('materializes manifest entries and runs commands in the workspace', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        entries: {
          'notes.txt': { type: 'file', content: 'hello sandbox\n' },
          assets: { type: 'dir', children: { 'pixel.png': { type: 'file', content: ONE_BY_ONE_PNG } } },
        },
      }),
    );
    const initialOutput = await session.execCommand({
      cmd: 'pwd && cat /workspace/notes.txt && ls /workspace/assets',
      shell: '/bin/sh',
      login: false,
      yieldTimeMs: 500,
    });
    const sessionId = Number(initialOutput.match(/Process running with session ID (\d+)/)?.[1]);
    const output = Number.isFinite(sessionId)
      ? `${initialOutput}${await writeUntilExit({ writeStdin: (args) => session.writeStdin(args) }, sessionId, '')}`
      : initialOutput;
    expect(output).toContain('Process exited with code 0');
    expect(output).toContain('/workspace');
    expect(output).toContain('hello sandbox');
    expect(output).toContain('pixel.png');
  });

  it('translates command paths only at the manifest root boundary', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ root: '/workspace' }));
    await box(session).mkdir('/workspace2');
    await box(session).writeFile('/workspace2/leak.txt', 'outside');
    const output = await session.execCommand({
      cmd: 'if test -e /workspace/leak.txt; then printf bad; else printf ok; fi',
      shell: '/bin/sh',
      login: false,
      yieldTimeMs: 1_000,
    });
    expect(output).toMatch(/Output:\s*ok\s*$/u);
  });

  it('returns structured exec results before model-facing formatting', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    const result = await session.exec({
      cmd: 'printf stdout; printf stderr >&2; exit 7',
      shell: '/bin/sh',
      login: false,
      yieldTimeMs: 1_000,
    });
    expect(result.exitCode).toBe(7);
    expect(result.sessionId).toBeUndefined();
    expect(result.stdout).toBe('stdout');
    expect(result.stderr).toBe('stderr');
    expect(result.output).toContain('stdout');
    expect(result.output).toContain('stderr');
    expect(result.wallTimeSeconds).toEqual(expect.any(Number));
    const formatted = await session.execCommand({ cmd: 'printf formatted', shell: '/bin/sh', login: false, yieldTimeMs: 1_000 });
    expect(formatted).toContain('Process exited with code 0');
    expect(formatted).toContain('formatted');
  });

  it('does not inherit host process environment variables', async () => {
    const originalOpenAIKey = process.env.OPENAI_API_KEY;
    process.env.OPENAI_API_KEY = 'host-secret';
    try {
      const client = stasisSandboxClient();
      const session = await client.create(new Manifest({ environment: { SANDBOX_FLAG: 'manifest' } }));
      const output = await session.execCommand({
        cmd: 'printf "key=%s flag=%s" "${OPENAI_API_KEY:-}" "$SANDBOX_FLAG"',
        shell: '/bin/sh',
        login: false,
        yieldTimeMs: 2_000,
      });
      expect(output).toContain('key= flag=manifest');
      expect(output).not.toContain('host-secret');
    } finally {
      if (typeof originalOpenAIKey === 'undefined') delete process.env.OPENAI_API_KEY;
      else process.env.OPENAI_API_KEY = originalOpenAIKey;
    }
  });

  it('resolves async manifest environment values before starting commands', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        environment: { RESOLVED_ENV: { value: 'placeholder', resolve: async () => 'runtime-value', ephemeral: true } },
      }),
    );
    const output = await session.execCommand({ cmd: 'printf "%s" "$RESOLVED_ENV"', shell: '/bin/sh', login: false, yieldTimeMs: 1_000 });
    const serialized = await client.serializeSessionState(session.state);
    expect(output).toContain('runtime-value');
    expect(serialized.environment).not.toHaveProperty('RESOLVED_ENV');
  });

  it('rejects symbolic links inside local_dir entries', async () => {
    const sourceDir = join(rootDir, 'source');
    const outsideFile = join(rootDir, 'outside.txt');
    await mkdir(sourceDir);
    await writeFile(join(sourceDir, 'safe.txt'), 'safe');
    await writeFile(outsideFile, 'outside');
    await symlink(outsideFile, join(sourceDir, 'link.txt'));
    const client = stasisSandboxClient();
    await expect(
      client.create(
        new Manifest({
          extraPathGrants: [{ path: sourceDir, readOnly: true }],
          entries: { data: { type: 'local_dir', src: sourceDir } },
        }),
      ),
    ).rejects.toThrow(/local_dir entries do not support symbolic links/);
  });

  it('rejects symbolic links in local_file entries', async () => {
    const outsideFile = join(rootDir, 'outside.txt');
    const linkFile = join(rootDir, 'link.txt');
    await writeFile(outsideFile, 'outside');
    await symlink(outsideFile, linkFile);
    const client = stasisSandboxClient();
    await expect(
      client.create(
        new Manifest({
          extraPathGrants: [{ path: rootDir, readOnly: true }],
          entries: { copied: { type: 'local_file', src: linkFile } },
        }),
      ),
    ).rejects.toThrow(/local_file entries do not support symbolic links/);
  });

  it('rejects symbolic link ancestors in local_file entries', async () => {
    const targetDir = join(rootDir, 'target');
    await mkdir(join(targetDir, 'sub'), { recursive: true });
    await writeFile(join(targetDir, 'sub', 'secret.txt'), 'secret');
    await symlink(targetDir, join(rootDir, 'link'), 'dir');
    const client = stasisSandboxClient();
    await expect(
      client.create(
        new Manifest({
          extraPathGrants: [{ path: rootDir, readOnly: true }],
          entries: { copied: { type: 'local_file', src: join(rootDir, 'link', 'sub', 'secret.txt') } },
        }),
      ),
    ).rejects.toThrow(/local_file entries do not support symbolic link ancestors/);
  });

  it('rejects symbolic link ancestors in local_dir entries', async () => {
    const targetDir = join(rootDir, 'target');
    await mkdir(join(targetDir, 'sub'), { recursive: true });
    await writeFile(join(targetDir, 'sub', 'safe.txt'), 'safe');
    await symlink(targetDir, join(rootDir, 'link'), 'dir');
    const client = stasisSandboxClient();
    await expect(
      client.create(
        new Manifest({
          extraPathGrants: [{ path: rootDir, readOnly: true }],
          entries: { data: { type: 'local_dir', src: join(rootDir, 'link', 'sub') } },
        }),
      ),
    ).rejects.toThrow(/local_dir entries do not support symbolic link ancestors/);
  });

  it('validates materialization concurrency limits', async () => {
    const client = stasisSandboxClient({ concurrencyLimits: { manifestEntries: 0 } });
    await expect(
      client.create(new Manifest({ entries: { 'notes.txt': { type: 'file', content: 'hello sandbox\n' } } })),
    ).rejects.toThrow(/Sandbox concurrency limits must be positive numbers/);
  });

  // The next four call UnixLocal's materializeLocalWorkspaceManifest helper
  // upstream; here the same manifests go through the provider's create
  // (local sources are uploaded from this machine) and the result is read
  // in the sandbox.
  it('rejects local_file sources outside the local source base directory without a grant', async () => {
    const outsideDir = join(rootDir, 'outside');
    await mkdir(outsideDir);
    await writeFile(join(outsideDir, 'secret.txt'), 'secret');
    const client = stasisSandboxClient({ localSourceBaseDir: join(rootDir, 'base') });
    await expect(
      client.create(new Manifest({ entries: { copied: { type: 'local_file', src: join(outsideDir, 'secret.txt') } } })),
    ).rejects.toThrow(/local_file source must stay within/);
  });

  it('allows local_file sources outside the local source base directory with a grant', async () => {
    const outsideDir = join(rootDir, 'outside-granted');
    await mkdir(outsideDir);
    await writeFile(join(outsideDir, 'secret.txt'), 'secret');
    const client = stasisSandboxClient({ localSourceBaseDir: join(rootDir, 'base') });
    const session = await client.create(
      new Manifest({
        extraPathGrants: [{ path: outsideDir, readOnly: true }],
        entries: { copied: { type: 'local_file', src: join(outsideDir, 'secret.txt') } },
      }),
    );
    await expect(box(session).readFile('/workspace/copied')).resolves.toBe('secret');
  });

  it('allows local_dir sources inside the local source base directory without a grant', async () => {
    const base = join(rootDir, 'base');
    const source = join(base, 'source');
    await mkdir(source, { recursive: true });
    await writeFile(join(source, 'safe.txt'), 'safe');
    const client = stasisSandboxClient({ localSourceBaseDir: base });
    const session = await client.create(new Manifest({ entries: { copied: { type: 'local_dir', src: source } } }));
    await expect(box(session).readFile('/workspace/copied/safe.txt')).resolves.toBe('safe');
  });

  it('allows local_dir sources outside the local source base directory with a grant', async () => {
    const outsideDir = join(rootDir, 'absolute-outside');
    await mkdir(outsideDir);
    await writeFile(join(outsideDir, 'secret.txt'), 'secret');
    const client = stasisSandboxClient({ localSourceBaseDir: join(rootDir, 'base') });
    const session = await client.create(
      new Manifest({
        extraPathGrants: [{ path: outsideDir, readOnly: true }],
        entries: { copied: { type: 'local_dir', src: outsideDir } },
      }),
    );
    await expect(box(session).readFile('/workspace/copied/secret.txt')).resolves.toBe('secret');
  });

  it('applies explicit entry permissions during materialization', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        entries: {
          bin: {
            type: 'dir',
            permissions: 'drwxr-x---',
            children: { 'run.sh': { type: 'file', content: '#!/bin/sh\n', permissions: '-rwx------' } },
          },
        },
      }),
    );
    expect(await box(session).mode('/workspace/bin')).toBe(0o750);
    expect(await box(session).mode('/workspace/bin/run.sh')).toBe(0o700);
  });

  it('applies default entry permissions during materialization', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({ entries: { bin: { type: 'dir', children: { 'run.sh': { type: 'file', content: '#!/bin/sh\n' } } } } }),
    );
    expect(await box(session).mode('/workspace/bin')).toBe(0o755);
    expect(await box(session).mode('/workspace/bin/run.sh')).toBe(0o755);
  });

  it('rejects manifest identity metadata that cannot be enforced locally', async () => {
    const client = stasisSandboxClient();
    await expect(client.create(new Manifest({ users: [{ name: 'sandbox-user' }] }))).rejects.toThrow(
      /does not support manifest users yet/,
    );
    await expect(
      client.create(
        new Manifest({
          entries: { data: { type: 'mount', source: 's3://bucket/data', mountStrategy: { type: 'in_container' } } },
        }).withInContainerMountCredentialExposureAcknowledged('data'),
      ),
    ).rejects.toThrow(/SDK-supported strategy/u);
    const session = await client.create(new Manifest());
    await expect(
      session.materializeEntry({
        path: 'notes.txt',
        entry: { type: 'file', content: 'hello\n', group: { name: 'sandbox-group' } },
      }),
    ).rejects.toThrow(/does not support sandbox entry group ownership yet/);
    await session.close();
  });

  it('persists and hydrates local workspace archives', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        entries: {
          'keep.txt': { type: 'file', content: 'keep\n' },
          scratch: { type: 'dir', ephemeral: true, children: { 'temp.txt': { type: 'file', content: 'temp\n' } } },
        },
      }),
    );
    const archive = await session.persistWorkspace();
    await box(session).writeFile('/workspace/keep.txt', 'mutated\n');
    await box(session).writeFile('/workspace/stale.txt', 'stale\n');
    await session.hydrateWorkspace(archive);
    await expect(box(session).readFile('/workspace/keep.txt')).resolves.toBe('keep\n');
    await expect(box(session).lstat('/workspace/stale.txt')).rejects.toThrow();
    await expect(box(session).lstat('/workspace/scratch')).rejects.toThrow();
    await session.close();
  });

  it('rejects local workspace archive hydration over resource limits', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({ entries: { 'one.txt': { type: 'file', content: '1' }, 'two.txt': { type: 'file', content: '2' } } }),
    );
    const archive = await session.persistWorkspace();
    await expect(
      session.hydrateWorkspace(archive, { archiveLimits: { maxInputBytes: null, maxExtractedBytes: null, maxMembers: 1 } }),
    ).rejects.toMatchObject({
      details: { reason: 'archive member count exceeds limit', limit: 1, actual: 2, member: 'two.txt' },
    });
    await expect(
      session.hydrateWorkspace(archive, { archiveLimits: { maxInputBytes: null, maxExtractedBytes: null, maxMembers: 2 } }),
    ).resolves.toBeUndefined();
    await session.close();
  });

  it('allows filesystem helpers to use extra path grants', async () => {
    const readGrantDir = `${outside}/read-grant`;
    const writeGrantDir = `${outside}/write-grant`;
    const outsideDir = `${outside}/outside`;
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({ extraPathGrants: [{ path: readGrantDir, readOnly: true }, { path: writeGrantDir }] }),
    );
    await box(session).mkdir(readGrantDir);
    await box(session).mkdir(writeGrantDir);
    await box(session).mkdir(outsideDir);
    await box(session).writeFile(`${readGrantDir}/input.txt`, 'granted\n');
    await box(session).writeFile(`${outsideDir}/secret.txt`, 'blocked\n');
    expect(await session.pathExists(join(readGrantDir, 'input.txt'))).toBe(true);
    await expect(session.pathExists(join(outsideDir, 'secret.txt'))).rejects.toThrow(/escapes the workspace root/);
    const editor = session.createEditor();
    await expect(
      editor.createFile({ type: 'create_file', path: join(readGrantDir, 'blocked.txt'), diff: '+blocked' }),
    ).rejects.toThrow(/read-only extra path grant/);
    await editor.createFile({ type: 'create_file', path: join(writeGrantDir, 'created.txt'), diff: '+created' });
    expect(await box(session).readFile(join(writeGrantDir, 'created.txt'))).toBe('created');
  });

  it('allows view_image only for explicitly granted absolute paths', async () => {
    const grantedDir = `${outside}/granted-images`;
    const grantedImagePath = join(grantedDir, 'granted.png');
    const ungrantedImagePath = join(outside, 'ungranted-images', 'ungranted.png');
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ extraPathGrants: [{ path: grantedDir, readOnly: true }] }));
    await box(session).mkdir(grantedDir);
    await session.sandbox.files.write(grantedImagePath, ONE_BY_ONE_PNG);
    await expect(session.viewImage({ path: grantedImagePath })).resolves.toMatchObject({
      type: 'image',
      image: { data: expect.any(Uint8Array), mediaType: 'image/png' },
    });
    await expect(session.viewImage({ path: ungrantedImagePath })).rejects.toThrow(/escapes the workspace root/);
  });

  it('rejects symlink escapes in filesystem helpers', async () => {
    const outsideDir = outside;
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    await box(session).mkdir(outsideDir);
    await session.sandbox.files.write(`${outsideDir}/secret.png`, ONE_BY_ONE_PNG);
    await box(session).writeFile(`${outsideDir}/secret.txt`, 'outside\n');
    await box(session).symlink(outsideDir, '/workspace/escape');
    await box(session).symlink(`${outsideDir}/secret.txt`, '/workspace/secret-link.txt');
    await expect(session.pathExists('escape/secret.png')).rejects.toThrow(/escapes the workspace root/);
    await expect(session.viewImage({ path: 'escape/secret.png' })).rejects.toThrow(/escapes the workspace root/);
    const editor = session.createEditor();
    await expect(editor.createFile({ type: 'create_file', path: 'escape/created.txt', diff: '+created' })).rejects.toThrow(
      /escapes the workspace root/,
    );
    await expect(
      editor.updateFile({ type: 'update_file', path: 'secret-link.txt', diff: '@@\n-outside\n+patched\n' }),
    ).rejects.toThrow(/escapes the workspace root/);
    await expect(box(session).readFile(`${outsideDir}/created.txt`)).rejects.toThrow();
    expect(await box(session).readFile(`${outsideDir}/secret.txt`)).toBe('outside\n');
  });

  it('rejects symlink escapes during materialization', async () => {
    const outsideDir = outside;
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    await box(session).mkdir(outsideDir);
    await box(session).writeFile(`${outsideDir}/target.txt`, 'outside\n');
    await box(session).symlink(outsideDir, '/workspace/escape');
    await expect(
      session.materializeEntry({ path: 'escape/created.txt', entry: { type: 'file', content: 'created\n' } }),
    ).rejects.toThrow(/escapes the workspace root/);
    await expect(box(session).readFile(`${outsideDir}/created.txt`)).rejects.toThrow();
    await box(session).mkdir('/workspace/data');
    await box(session).symlink(`${outsideDir}/target.txt`, '/workspace/data/target.txt');
    await expect(
      session.materializeEntry({ path: 'data/target.txt', entry: { type: 'file', content: 'patched\n' } }),
    ).rejects.toThrow(/symbolic link/);
    expect(await box(session).readFile(`${outsideDir}/target.txt`)).toBe('outside\n');
  });

  it('supports apply_patch and view_image inside the sandbox', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        entries: {
          'notes.txt': { type: 'file', content: 'hello sandbox\n' },
          'pixel.png': { type: 'file', content: ONE_BY_ONE_PNG },
          'vector.svg': { type: 'file', content: '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"></svg>' },
        },
      }),
    );
    await session.createEditor().updateFile({
      type: 'update_file',
      path: 'notes.txt',
      diff: '@@\n-hello sandbox\n+hello patched\n',
      moveTo: 'renamed/notes.txt',
    });
    await expect(
      session.createEditor().createFile({ type: 'create_file', path: 'renamed/notes.txt', diff: '+overwrite\n' }),
    ).rejects.toThrow(/EEXIST|file already exists/i);
    const initialOutput = await session.execCommand({
      cmd: 'test ! -e notes.txt; cat renamed/notes.txt',
      shell: '/bin/sh',
      login: false,
      yieldTimeMs: 500,
    });
    const output = await collectActiveCommandOutput(session, initialOutput);
    const image = await session.viewImage({ path: 'pixel.png' });
    const svg = await session.viewImage({ path: 'vector.svg' });
    expect(output).toContain('hello patched');
    expect(image).toMatchObject({ type: 'image', image: { data: expect.any(Uint8Array), mediaType: 'image/png' } });
    expect(svg).toMatchObject({ type: 'image', image: { data: expect.any(Uint8Array), mediaType: 'image/svg+xml' } });
  });

  it('validates raster content while preserving SVG filename compatibility', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        entries: {
          'fake.png': { type: 'file', content: 'not an image\n' },
          'payload.bin': { type: 'file', content: ONE_BY_ONE_PNG },
          'commented.svg': { type: 'file', content: '<!-- generated -->\n<svg></svg>' },
          'vector.svgz': { type: 'file', content: Uint8Array.from(gzipSync('<svg></svg>')) },
        },
      }),
    );
    await expect(session.viewImage({ path: 'fake.png' })).rejects.toThrow('Unsupported image format for view_image: fake.png');
    await expect(session.viewImage({ path: 'payload.bin' })).resolves.toMatchObject({ type: 'image', image: { mediaType: 'image/png' } });
    await expect(session.viewImage({ path: 'commented.svg' })).resolves.toMatchObject({
      type: 'image',
      image: { mediaType: 'image/svg+xml' },
    });
    await expect(session.viewImage({ path: 'vector.svgz' })).resolves.toMatchObject({
      type: 'image',
      image: { mediaType: 'image/svg+xml' },
    });
  });

  it('applies stacked anchors through the sandbox editor', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({
        entries: {
          'stacked.py': {
            type: 'file',
            content: ['class First', '    def target():', '        return 0', '', 'class Second', '    def helper():', '        pass', '', '    def target():', '        pass', ''].join('\n'),
          },
        },
      }),
    );
    await session.createEditor().updateFile({
      type: 'update_file',
      path: 'stacked.py',
      diff: ['@@ class Second', '@@     def target():', '-        pass', '+        return 1'].join('\n'),
    });
    await expect(box(session).readFile('/workspace/stacked.py')).resolves.toBe(
      ['class First', '    def target():', '        return 0', '', 'class Second', '    def helper():', '        pass', '', '    def target():', '        return 1', ''].join('\n'),
    );
  });

  it('rejects hostPath before applying a manifest delta', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    await expect(
      session.applyManifest(new Manifest({ extraPathGrants: [{ path: '/mnt/shared-data', hostPath: rootDir, readOnly: true }] })),
    ).rejects.toMatchObject({
      code: 'unsupported_feature',
      details: { provider: 'stasis', feature: 'manifest.extraPathGrants.hostPath', path: '/mnt/shared-data' },
    });
    expect(session.state.manifest.extraPathGrants).toEqual([]);
    await session.close();
  });

  it('supports incremental filesystem operations and manifest application', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ remoteMountCommandAllowlist: ['cat'] }));
    expect(session.supportsPty()).toBe(true);
    expect(await session.pathExists('missing.txt')).toBe(false);
    expect(() => session.resolveSandboxPath('../outside.txt')).toThrow(/must not escape root/);
    expect(session.resolveSandboxPath('..data')).toBe('/workspace/..data');
    await expect(session.execCommand({ cmd: 'pwd', workdir: '/tmp' })).rejects.toThrow(/escapes the workspace root/);
    expect(await session.writeStdin({ sessionId: 999 })).toContain('session not found: 999');
    await session.materializeEntry({ path: 'nested/materialized.txt', entry: { type: 'file', content: 'materialized\n' } });
    expect(await session.pathExists('nested/materialized.txt')).toBe(true);
    expect(session.state.manifest.remoteMountCommandAllowlist).toEqual(['cat']);
    await session.materializeEntry({ path: '..config', entry: { type: 'file', content: 'valid top-level dot path\n' } });
    expect(await session.pathExists('..config')).toBe(true);
    const editor = session.createEditor();
    await editor.createFile({ type: 'create_file', path: 'created/file.txt', diff: '+created' });
    await editor.deleteFile({ type: 'delete_file', path: 'created/file.txt' });
    expect(await session.pathExists('created/file.txt')).toBe(false);
    await session.applyManifest(
      new Manifest({ entries: { 'applied.txt': { type: 'file', content: 'applied\n' } }, environment: { APPLIED_VALUE: 'yes' } }),
    );
    const output = await session.execCommand({
      cmd: 'printf "%s\\n" "$APPLIED_VALUE"; cat applied.txt nested/materialized.txt',
      shell: '/bin/sh',
      login: false,
      yieldTimeMs: 2_000,
    });
    expect(output).toContain('yes');
    expect(output).toContain('applied');
    expect(output).toContain('materialized');
    expect(session.state.manifest.remoteMountCommandAllowlist).toEqual(['cat']);
    await expect(session.viewImage({ path: 'missing.png' })).rejects.toThrow(/Image file not found/);
    await expect(session.viewImage({ path: 'nested' })).rejects.toThrow(/Image path is not a file/);
    await expect(session.viewImage({ path: 'applied.txt' })).rejects.toThrow(/Unsupported image format/);
    expect(() => session.resolveSandboxPath('/tmp')).toThrow(/escapes the workspace root/);
  });

  it('resolves localhost endpoints for exposed ports', async () => {
    const client = stasisSandboxClient({ exposedPorts: [4173, 4173], snapshot: new NoopSnapshotSpec() });
    const session = await client.create(new Manifest());
    const endpoint = await session.resolveExposedPort(4173);
    expect(session.state.configuredExposedPorts).toEqual([4173]);
    // stasis serves the port on a local relay: its port is the relay's, not 4173.
    expect(endpoint).toEqual({ host: '127.0.0.1', port: expect.any(Number), tls: false, query: '' });
    expect(session.state.exposedPorts).toEqual({ '4173': endpoint });
    await expect(session.resolveExposedPort(3000)).rejects.toThrow(/was not configured to expose port 3000/);
    await expect(session.resolveExposedPort(0)).rejects.toThrow(/Exposed ports must be integers between 1 and 65535/);
    const serialized = await client.serializeSessionState(session.state);
    expect(serialized.configuredExposedPorts).toEqual([4173]);
    const roundTripped = await client.deserializeSessionState(serialized);
    expect(roundTripped.configuredExposedPorts).toEqual([4173]);
    await session.close();
  });

  it('accepts absolute sandbox paths when the manifest root is slash', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(
      new Manifest({ root: '/', entries: { 'tmp/notes.txt': { type: 'file', content: 'root path\n' } } }),
    );
    expect(session.resolveSandboxPath('/tmp/notes.txt')).toBe('/tmp/notes.txt');
    expect(await session.pathExists('/tmp/notes.txt')).toBe(true);
    const absoluteOutput = await session.execCommand({ cmd: 'cat /tmp/notes.txt', shell: '/bin/sh', login: false, yieldTimeMs: 2_000 });
    expect(absoluteOutput).toContain('root path');
    const output = await session.execCommand({ cmd: 'printf "%s" "$PWD"', workdir: '/tmp', shell: '/bin/sh', login: false, yieldTimeMs: 2_000 });
    expect(output).toContain('/tmp');
    await expect(session.pathExists('/../outside.txt')).rejects.toThrow(/must not escape root/);
  });
});

describe('StasisSandboxClient (UnixLocal suite, continued)', () => {
  let rootDir: string;

  beforeEach(async () => {
    rootDir = await mkdtemp(join(tmpdir(), 'agents-core-sandbox-test-'));
  });

  afterEach(async () => {
    await rm(rootDir, { recursive: true, force: true });
  });

  it('translates real workspace paths in command output back to the manifest root', async () => {
    // UnixLocal runs in a host directory and rewrites its real path to the
    // manifest root; in a stasis sandbox the root is the real path.
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ root: '/workspace' }));
    const output = await session.execCommand({ cmd: 'pwd -P', shell: '/bin/sh', login: false, yieldTimeMs: 1_000 });
    expect(output).toContain('/workspace');
    expect(output).not.toContain(rootDir);
  });

  it('rejects credentialed mount mutations before resolving runAs', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    await expect(
      session.materializeEntry({
        path: 'remote',
        entry: s3Mount({
          bucket: 'private',
          accessKeyId: 'access-key',
          secretAccessKey: 'secret-key',
          mountStrategy: inContainerMountStrategy(),
        }),
        runAs: 'missing-sandbox-user',
      }),
    ).rejects.toBeInstanceOf(SandboxMountError);
    expect(session.state.manifest.entries).not.toHaveProperty('remote');
  });

  // The next three call UnixLocal's materializeLocalWorkspaceManifestMounts /
  // materializeLocalWorkspaceManifest with the SDK's custom mount hooks
  // (supportsMount, materializeMount); stasis takes the same hooks as client
  // options and runs them in create.
  it('calls custom mount materializers once per mount target', async () => {
    const calls: Array<{ logicalPath: string; source?: string }> = [];
    const manifest = new Manifest({ entries: { data: { type: 'mount', mountStrategy: { type: 'in_container' } } } });
    const client = stasisSandboxClient({
      supportsMount: () => true,
      materializeMount: async ({ logicalPath, entry }) => {
        calls.push({ logicalPath, source: entry.type === 'mount' ? entry.source : undefined });
      },
    });
    await client.create(manifest);
    expect(calls).toEqual([{ logicalPath: 'data', source: undefined }]);
  });

  it('materializes parent mount targets before nested targets', async () => {
    const calls: string[] = [];
    const manifest = new Manifest({
      entries: {
        parent: { type: 'mount', mountPath: 'mounted', mountStrategy: { type: 'in_container' } },
        child: { type: 'mount', mountPath: 'mounted/cache', mountStrategy: { type: 'in_container' } },
        other: { type: 'mount', mountStrategy: { type: 'in_container' } },
      },
    });
    const client = stasisSandboxClient({
      supportsMount: () => true,
      materializeMount: async ({ logicalPath }) => {
        calls.push(logicalPath);
      },
    });
    await client.create(manifest);
    expect(calls).toEqual(['parent', 'other', 'child']);
  });

  it('materializes initial manifest mounts after normal entries in parent-first order', async () => {
    const calls: string[] = [];
    const manifest = new Manifest({
      entries: {
        child: { type: 'mount', mountPath: 'mounted/cache', mountStrategy: { type: 'in_container' } },
        notes: { type: 'file', content: 'notes' },
        parent: { type: 'mount', mountPath: 'mounted', mountStrategy: { type: 'in_container' } },
      },
    });
    let notesAtFirstMount: string | undefined;
    const client = stasisSandboxClient({
      supportsMount: () => true,
      materializeMount: async ({ logicalPath, session }) => {
        notesAtFirstMount ??= await box(session).readFile('/workspace/notes');
        calls.push(logicalPath);
      },
    });
    const session = await client.create(manifest);
    expect(await box(session).readFile('/workspace/notes')).toBe('notes');
    expect(notesAtFirstMount).toBe('notes');
    expect(calls).toEqual(['parent', 'child']);
  });

  it('materializes lazy skills through sandbox session hooks', async () => {
    const skillsRoot = join(rootDir, 'skills');
    const dynamicSkillDir = join(skillsRoot, 'dynamic-skill');
    await mkdir(dynamicSkillDir, { recursive: true });
    await writeFile(join(dynamicSkillDir, 'SKILL.md'), '# dynamic skill\n', 'utf8');
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest({ extraPathGrants: [{ path: skillsRoot, readOnly: true }] }));
    const capability = skills({
      lazyFrom: { source: { type: 'local_dir', src: skillsRoot }, index: [{ name: 'dynamic-skill', description: 'dynamic' }] },
    });
    capability.bind(session);
    const [tool] = capability.tools();
    const first = await (tool as any).invoke(undefined, JSON.stringify({ skill_name: 'dynamic-skill' }));
    const second = await (tool as any).invoke(undefined, JSON.stringify({ skill_name: 'dynamic-skill' }));
    const output = await session.execCommand({ cmd: 'cat .agents/dynamic-skill/SKILL.md' });
    expect(first).toEqual({ status: 'loaded', skill_name: 'dynamic-skill', path: '.agents/dynamic-skill' });
    expect(second).toEqual({ status: 'already_loaded', skill_name: 'dynamic-skill', path: '.agents/dynamic-skill' });
    expect(output).toContain('# dynamic skill');
  });
});
