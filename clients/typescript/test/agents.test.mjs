// stasis as the OpenAI Agents SDK's sandbox provider, against a live daemon.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';

import { applyDiff } from '@openai/agents';
import { Manifest, SandboxArchiveError, SandboxInvalidManifestPathError, SandboxUnsupportedFeatureError, SandboxWorkspaceReadNotFoundError, file, inContainerMountStrategy, s3Mount } from '@openai/agents/sandbox';

import { StasisClient } from '../dist/index.js';
import { StasisSandboxClient, StasisSandboxSession } from '../dist/agents/index.js';
import { Daemon, HERE, backends, onlyFullOnMicrovm } from './daemon.mjs';

const run = promisify(execFile);
const OPTIONS = { manifest: { lifecycle: { idle_timeout_secs: 600 } } };

async function phase(d, name, stateFile, script = 'agent_flow.mjs', ...args) {
  const env = { ...process.env, ...d.env(), OPENAI_AGENTS_DISABLE_TRACING: '1' };
  delete env.OPENAI_API_KEY;
  try {
    const { stdout } = await run(process.execPath, [join(HERE, script), name, stateFile, ...args], { env, timeout: 600_000 });
    return JSON.parse(stdout.trim().split('\n').at(-1));
  } catch (e) {
    throw new Error(`${name} failed:\n${e.stdout}\n${String(e.stderr).slice(-6000)}`);
  }
}

for (const backend of backends()) {
  describe(`agents provider (${backend})`, { timeout: 900_000 }, () => {
    let d;
    let api;
    before(async () => {
      d = await new Daemon(backend).start();
      api = new StasisClient(d.conn());
    });
    after(async () => {
      for (const s of await api.list().catch(() => [])) {
        if (!['destroyed', 'failed'].includes(s.state)) await s.destroy().catch(() => undefined);
      }
      await d.stop();
    });

    it('creates, execs, reads and writes, serializes, reattaches and restores', { skip: onlyFullOnMicrovm(backend) }, async () => {
      const provider = new StasisSandboxClient(d.conn());
      const manifest = new Manifest({
        entries: { 'notes/hello.txt': file({ content: 'hello from the manifest\n' }) },
        environment: { GREETING: 'hi' },
      });
      const session = await provider.create({ manifest, options: OPTIONS });
      assert.ok(session instanceof StasisSandboxSession);
      const sid = session.state.sandboxId;
      assert.match(sid, /^sb-/);
      assert.match(session.state.runId, /^run-/);
      assert.equal(Buffer.from(await session.readFile({ path: 'notes/hello.txt' })).toString(), 'hello from the manifest\n');
      const r = await session.exec({ cmd: 'echo $GREETING; pwd' });
      assert.equal(r.exitCode, 0);
      assert.equal(r.output, 'hi\n/workspace\n');
      assert.equal((await session.exec({ cmd: 'exit 4' })).exitCode, 4);
      assert.match(await session.execCommand({ cmd: 'echo formatted' }), /Process exited with code 0\nOutput:\nformatted/);
      // A command outlasting its yield time keeps a session the model polls.
      const slow = await session.exec({ cmd: 'read x; echo got $x', yieldTimeMs: 300 });
      assert.equal(typeof slow.sessionId, 'number');
      const done = await session.writeStdin({ sessionId: slow.sessionId, chars: 'it\n', yieldTimeMs: 5000 });
      assert.match(done, /Process exited with code 0/);
      assert.match(done, /got it/);
      const tty = await session.exec({ cmd: 'test -t 0 && test -t 1 && echo on-a-terminal', tty: true });
      assert.equal(tty.output, 'on-a-terminal\r\n');
      assert.equal(session.supportsPty(), true);
      await session.writeFile('out/result.txt', 'result');
      assert.deepEqual(await session.listDir({ path: 'out' }), [{ name: 'result.txt', path: 'out/result.txt', type: 'file' }]);
      assert.equal(await session.pathExists('out/result.txt'), true);
      assert.equal(await session.pathExists('out/none.txt'), false);
      assert.equal(await session.directoryExists('out'), true);
      await assert.rejects(session.readFile({ path: 'missing.txt' }), SandboxWorkspaceReadNotFoundError);
      const partial = await session.readFile({ path: 'notes/hello.txt', maxBytes: 5 });
      assert.equal(Buffer.from(partial).toString(), 'hello');

      // The workspace boundary, as the SDK draws it (lexically).
      await assert.rejects(session.readFile({ path: '../etc/passwd' }), SandboxInvalidManifestPathError);
      await assert.rejects(session.readFile({ path: '/etc/passwd' }), SandboxInvalidManifestPathError);
      await assert.rejects(session.exec({ cmd: 'pwd', workdir: '/etc' }), SandboxInvalidManifestPathError);

      // Ephemeral entries are not kept in a workspace archive.
      await session.materializeEntry({ path: 'secret.txt', entry: file({ content: 'token', ephemeral: true }) });
      const withoutSecret = await session.persistWorkspace();
      assert.ok(!Buffer.from(withoutSecret).toString('latin1').includes('secret.txt'));
      await session.exec({ cmd: 'rm -f secret.txt' });
      // Workspace archives round-trip.
      const tar = await session.persistWorkspace();
      await session.exec({ cmd: 'rm -rf out' });
      await session.hydrateWorkspace(tar);
      assert.equal(Buffer.from(await session.readFile({ path: 'out/result.txt' })).toString(), 'result');

      // Archives that would leave the workspace are refused before extraction.
      for (const make of [
        'ln -s /etc/passwd evil && tar -cf /tmp/bad.tar evil',
        'mkdir -p d && ln -s ../../outside d/up && tar -cf /tmp/bad.tar d',
        'echo x > /tmp/abs.txt && tar -cPf /tmp/bad.tar /tmp/abs.txt',
      ]) {
        const r = await session.sandbox.exec(['sh', '-c', `cd /tmp && rm -rf evil d /tmp/bad.tar && ${make}`]);
        assert.ok(r.ok, r.stderr);
        const bad = await session.sandbox.files.read('/tmp/bad.tar');
        await assert.rejects(session.hydrateWorkspace(bad), SandboxArchiveError, make);
      }
      await assert.rejects(session.hydrateWorkspace(tar, { archiveLimits: { maxMembers: 1 } }), (e) => {
        assert.ok(e instanceof SandboxArchiveError);
        assert.equal(e.details.reason, 'archive member count exceeds limit');
        assert.equal(e.details.limit, 1);
        assert.equal(e.details.actual, 2);
        assert.equal(typeof e.details.member, 'string');
        return true;
      });
      // The archive's root entry (./) is not a member of the workspace: a 2-file tar fits maxMembers 2.
      assert.ok((await session.sandbox.exec(['sh', '-c', 'rm -rf /tmp/two && mkdir /tmp/two && echo 1 > /tmp/two/a && echo 2 > /tmp/two/b && tar -C /tmp/two -cf /tmp/two.tar .'])).ok);
      await session.hydrateWorkspace(await session.sandbox.files.read('/tmp/two.tar'), { archiveLimits: { maxMembers: 2 } });
      assert.equal(Buffer.from(await session.readFile({ path: 'b' })).toString(), '2\n');
      assert.equal(await session.pathExists('evil'), false);
      // A hydration replaces the workspace: what the archive does not hold is gone.
      assert.equal(await session.pathExists('out/result.txt'), false);
      await session.hydrateWorkspace(tar);
      assert.equal(await session.pathExists('b'), false);

      // The runner saves the state of an interrupted run: a snapshot, then a pause.
      const payload = await provider.serializeSessionState(session.state, { preserveOwnedSession: true });
      assert.match(payload.snapshotId, /^snap-/);
      assert.equal((await api.get(sid)).state, 'paused');
      const text = JSON.stringify(payload);
      if (d.tokenFile) assert.ok(!text.includes(readFileSync(d.tokenFile, 'utf8').trim()));

      // Resume in a "new process" (a new provider): reattaches to the same sandbox.
      const provider2 = new StasisSandboxClient(d.conn());
      const state = await provider2.deserializeSessionState(JSON.parse(text));
      const resumed = await provider2.resume(state);
      assert.equal(resumed.origin, 'reattached');
      assert.equal(Buffer.from(await resumed.readFile({ path: 'out/result.txt' })).toString(), 'result');

      // The sandbox is gone: resume restores the snapshot and moves the run.
      await (await api.get(sid)).destroy();
      const state2 = await provider2.deserializeSessionState(JSON.parse(text));
      const restored = await provider2.resume(state2);
      assert.equal(restored.origin, 'restored');
      assert.notEqual(restored.state.sandboxId, sid);
      assert.equal(Buffer.from(await restored.readFile({ path: 'out/result.txt' })).toString(), 'result');
      assert.equal((await api.runs.get(state2.runId)).data.sandbox, restored.state.sandboxId);
      restored.state.onDelete = 'destroy';
      await provider2.delete(restored.state);
      assert.equal((await api.get(restored.state.sandboxId)).state, 'destroyed');
    });

    it('applies patches (apply_patch) and shows images (view_image)', { skip: onlyFullOnMicrovm(backend) }, async () => {
      const provider = new StasisSandboxClient(d.conn());
      const session = await provider.create({ manifest: new Manifest(), options: { ...OPTIONS, recordRun: false } });
      const editor = session.createEditor();
      assert.equal((await editor.createFile({ type: 'create_file', path: 'src/a.txt', diff: '+one\n+two\n' })).status, 'completed');
      const created = applyDiff('', '+one\n+two\n', 'create');
      assert.equal(Buffer.from(await session.readFile({ path: 'src/a.txt' })).toString(), created);
      // A create over an existing file throws (as the SDK's own providers do) and changes nothing.
      await assert.rejects(editor.createFile({ type: 'create_file', path: 'src/a.txt', diff: '+other\n' }), /already exists/);
      assert.equal(Buffer.from(await session.readFile({ path: 'src/a.txt' })).toString(), created);
      const up = await editor.updateFile({ type: 'update_file', path: 'src/a.txt', diff: '@@\n one\n-two\n+three\n', moveTo: 'src/b.txt' });
      assert.equal(up.status, 'completed');
      assert.equal(Buffer.from(await session.readFile({ path: 'src/b.txt' })).toString(), applyDiff(created, '@@\n one\n-two\n+three\n'));
      assert.equal(await session.pathExists('src/a.txt'), false);
      assert.equal((await editor.deleteFile({ type: 'delete_file', path: 'src/b.txt' })).status, 'completed');
      assert.equal((await editor.deleteFile({ type: 'delete_file', path: 'src/b.txt' })).status, 'failed');
      // A 1x1 PNG.
      const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');
      await session.writeFile('img/dot.png', png);
      const img = await session.viewImage({ path: 'img/dot.png' });
      assert.equal(img.type, 'image');
      assert.match(JSON.stringify(img), /image\/png/);
      await session.delete();
    });

    it('resolves symlinks in the sandbox: file helpers never follow one out of the workspace', { skip: onlyFullOnMicrovm(backend) }, async () => {
      const provider = new StasisSandboxClient(d.conn());
      const session = await provider.create({ manifest: new Manifest(), options: { ...OPTIONS, recordRun: false } });
      const sbx = session.sandbox;
      const setup = await sbx.exec(['sh', '-c', 'mkdir -p /outside /workspace/real && echo secret > /outside/file && ln -s /outside /workspace/out && ln -s /outside/file /workspace/leak && ln -s real /workspace/inner']);
      assert.ok(setup.ok, setup.stderr);
      for (const attempt of [
        () => session.readFile({ path: 'out/file' }),
        () => session.readFile({ path: 'leak' }),
        () => session.writeFile('out/file', 'overwritten'),
        () => session.writeFile('leak', 'overwritten'),
        () => session.listDir({ path: 'out' }),
        () => session.pathExists('out/file'),
        () => session.createEditor().createFile({ type: 'create_file', path: 'out/new.txt', diff: '+x\n' }),
        () => session.createEditor().updateFile({ type: 'update_file', path: 'leak', diff: '@@\n-secret\n+changed\n' }),
      ]) {
        await assert.rejects(attempt(), SandboxInvalidManifestPathError);
      }
      assert.equal(await sbx.files.readText('/outside/file'), 'secret\n');
      assert.equal(await sbx.files.exists('/outside/new.txt'), false);
      // exec's workdir too: a symlink out of the workspace is not a working directory.
      await assert.rejects(session.exec({ cmd: 'pwd', workdir: 'out' }), SandboxInvalidManifestPathError);
      // A symlink that stays inside the workspace is followed.
      await session.writeFile('inner/f.txt', 'inside');
      assert.equal(await sbx.files.readText('/workspace/real/f.txt'), 'inside');
      assert.equal(Buffer.from(await session.readFile({ path: 'inner/f.txt' })).toString(), 'inside');
      // Replacing the root by a symlink later authorizes nothing outside.
      assert.ok((await sbx.exec(['sh', '-c', 'mv /workspace /workspace.orig && ln -s /outside /workspace'])).ok);
      await assert.rejects(session.writeFile('file', 'overwritten'), SandboxInvalidManifestPathError);
      assert.equal(await sbx.files.readText('/outside/file'), 'secret\n');
      await sbx.destroy();
    });

    it('applies entry permissions, materializes entries, merges environment; dedupes ports; close() pauses; ^C reports 130', { skip: onlyFullOnMicrovm(backend) }, async () => {
      const provider = new StasisSandboxClient(d.conn());
      await assert.rejects(provider.create({ manifest: new Manifest(), options: { ...OPTIONS, exposedPorts: [0] } }), /between 1 and 65535/);
      await assert.rejects(
        provider.create({ manifest: new Manifest({ extraPathGrants: [{ path: '/data', hostPath: '/srv/data' }] }), options: OPTIONS }),
        SandboxUnsupportedFeatureError,
      );
      const manifest = new Manifest({
        entries: {
          'bin/run.sh': file({ content: '#!/bin/sh\necho ran\n' }),
          'private.txt': file({ content: 'p', permissions: { owner: 6, group: 0, other: 0 } }),
        },
      });
      const session = await provider.create({ manifest, options: { ...OPTIONS, recordRun: false, exposedPorts: [8000, 8000, 8001] } });
      assert.deepEqual(session.state.configuredExposedPorts, [8000, 8001]);
      // The SDK's default entry mode (0755) makes a script runnable.
      assert.equal((await session.exec({ cmd: './bin/run.sh' })).output, 'ran\n');
      assert.equal((await session.sandbox.files.stat('/workspace/private.txt')).mode, 0o600);
      await session.applyManifest(new Manifest({ environment: { ADDED: 'yes' }, entries: { 'later.txt': file({ content: 'l' }) } }));
      assert.equal((await session.exec({ cmd: 'echo $ADDED' })).output, 'yes\n');
      assert.equal(session.state.environment.ADDED, 'yes');
      assert.ok(Object.keys(session.state.manifest.entries).includes('later.txt'));
      // An entry materialized later (the SDK's skills do this) lands with its modes and joins the manifest.
      await session.materializeEntry({ path: 'skills/s', entry: { type: 'dir', children: { 'run.sh': file({ content: '#!/bin/sh\necho skill\n' }) } } });
      assert.equal((await session.exec({ cmd: './skills/s/run.sh' })).output, 'skill\n');
      assert.ok(Object.keys(session.state.manifest.entries).includes('skills/s'));
      await assert.rejects(session.materializeEntry({ path: '../escape', entry: file({ content: 'x' }) }), SandboxInvalidManifestPathError);
      // A runtime change to the environment survives the state's round trip.
      session.state.environment.RUNTIME_ONLY = 'kept';
      const back = await provider.deserializeSessionState(JSON.parse(JSON.stringify(await provider.serializeSessionState(session.state))));
      assert.equal(back.environment.RUNTIME_ONLY, 'kept');
      assert.equal(back.environment.ADDED, 'yes');
      // ^C to a command without a terminal ends it with the interrupt's exit code.
      const slow = await session.exec({ cmd: 'sleep 600', yieldTimeMs: 250 });
      const stopped = await session.writeStdin({ sessionId: slow.sessionId, chars: '\u0003', yieldTimeMs: 5000 });
      assert.match(stopped, /Process exited with code 130/);
      await session.close();
      assert.equal((await api.get(session.state.sandboxId)).state, 'paused');
    });

    it('refuses what stasis does not provide', async () => {
      const provider = new StasisSandboxClient(d.conn());
      await assert.rejects(
        provider.create({ manifest: new Manifest({ users: [{ name: 'bob' }] }), options: OPTIONS }),
        SandboxUnsupportedFeatureError,
      );
      await assert.rejects(
        provider.create({ manifest: new Manifest({ entries: { data: s3Mount({ bucket: 'b', mountStrategy: inContainerMountStrategy() }) } }), options: OPTIONS }),
        SandboxUnsupportedFeatureError,
      );
      // A local source outside the working directory and the grants.
      await assert.rejects(
        provider.create({ manifest: new Manifest({ entries: { src: { type: 'local_dir', src: '/etc' } } }), options: OPTIONS }),
        /local_dir source must stay within the local source base directory/,
      );
      await assert.rejects(provider.create({ manifest: new Manifest(), options: { manifest: { workdir: '/x' } } }), /root/);
    });

    it('exposes a port on a local relay', { skip: onlyFullOnMicrovm(backend) }, async () => {
      const provider = new StasisSandboxClient(d.conn());
      const session = await provider.create({ manifest: new Manifest(), options: { ...OPTIONS, exposedPorts: [8000] } });
      await session.exec({ cmd: 'mkdir -p www && echo hello-relay > www/hi.txt' });
      await session.sandbox.sessions.start(['python3', '-m', 'http.server', '8000', '--bind', '0.0.0.0', '--directory', 'www']);
      const ep = await session.resolveExposedPort(8000);
      assert.equal(ep.host, '127.0.0.1');
      let body = '';
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        const resp = await fetch(`http://${ep.host}:${ep.port}/hi.txt`);
        body = await resp.text();
        if (resp.status === 200) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      assert.equal(body, 'hello-relay\n');
      await assert.rejects(session.resolveExposedPort(9000), /was not configured to expose port 9000/);
      await session.delete();
      assert.equal((await api.get(session.state.sandboxId)).state, 'paused');
    });

    it('keeps a command running through an approval and finishes it after, in a new process', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'stasis-ts-inflight-'));
      try {
        const stateFile = join(dir, 'run_state.json');
        const first = await phase(d, 'start', stateFile, 'approval_flow.mjs');
        assert.deepEqual(first.interruptions, ['release_work']);
        assert.ok(Number.isInteger(first.sessionId), first.workOutput);
        // The state names the command's stasis session, for a resume in another process.
        const ref = first.processes?.[String(first.sessionId)];
        assert.ok(ref?.session, JSON.stringify(first.processes));

        const sbx = await api.get(first.sandboxId);
        // The interruption paused the sandbox, with the command in it.
        assert.equal(sbx.state, 'paused');
        assert.equal(await sbx.files.exists('done.txt'), false);
        const info = (await sbx.sessions.list()).find((s) => s.id === ref.session);
        assert.equal(info?.running, true);

        const second = await phase(d, 'resume', stateFile, 'approval_flow.mjs', String(first.sessionId));
        assert.equal(second.finalOutput, 'The work finished.');
        assert.equal(second.toolOutputs['call-release'], 'released (exit 0)');
        const poll = second.toolOutputs['call-poll'];
        assert.match(poll, /Process exited with code 0/);
        assert.match(poll, /work-finished/);
        assert.equal(await sbx.files.readText('done.txt'), 'finished\n');
        await sbx.destroy();
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    for (const fate of ['kept', 'destroyed']) {
      it(`pauses for an approval and finishes in a new process (sandbox ${fate})`, { skip: fate === 'kept' && onlyFullOnMicrovm(backend) }, async () => {
        const dir = mkdtempSync(join(tmpdir(), 'stasis-ts-flow-'));
        try {
          const stateFile = join(dir, 'run_state.json');
          const first = await phase(d, 'start', stateFile);
          assert.deepEqual(first.interruptions, ['send_email']);
          assert.equal(first.remainingSteps, 0);
          assert.equal(first.backendId, 'stasis');
          assert.match(first.sandboxId, /^sb-/);
          assert.match(first.runId, /^run-/);
          assert.match(first.snapshotId, /^snap-/);
          const sid = first.sandboxId;

          let sbx = await api.get(sid);
          // Between the phases the sandbox is paused: no compute while waiting.
          assert.equal(sbx.state, 'paused');
          assert.equal(await sbx.files.readText('computed.txt'), '91\n');
          assert.deepEqual((await api.runs.get(first.runId)).data.tool_calls, []);
          if (fate === 'destroyed') await sbx.destroy();

          const second = await phase(d, 'resume', stateFile);
          assert.deepEqual(second.approved, ['send_email']);
          assert.equal(second.finalOutput, 'Emailed ops: value is 91.');
          assert.equal(second.remainingSteps, 0);
          assert.equal(second.toolOutputs['call-email-1'], 'succeeded (replayed=false)');

          const runData = (await api.runs.get(first.runId)).data;
          sbx = await api.get(runData.sandbox);
          if (fate === 'kept') assert.equal(sbx.id, sid);
          else {
            assert.notEqual(sbx.id, sid);
            assert.equal(sbx.info.source_snapshot, first.snapshotId);
          }
          // The code ran once (in the first process), the email was sent once.
          assert.equal(await sbx.files.readText('computed.txt'), '91\n');
          const sent = (await sbx.files.readText('outbox/sent.log')).trim().split('\n').map((l) => JSON.parse(l));
          assert.deepEqual(sent, [{ to: 'ops@example.com', body: 'value is 91' }]);
          assert.deepEqual(
            runData.tool_calls.map((c) => [c.idempotency_key, c.state]),
            [['call-email-1', 'succeeded']],
          );

          if (fate === 'kept') {
            // The resumed process dies before saving its state and is run again
            // from the same saved RunState: the SDK asks for the tool again,
            // stasis answers from the record, and nothing is sent twice.
            const third = await phase(d, 'resume', stateFile);
            assert.equal(third.toolOutputs['call-email-1'], 'succeeded (replayed=true)');
            const again = await api.get(sid);
            assert.equal((await again.files.readText('outbox/sent.log')).trim().split('\n').length, 1);
            assert.equal(await again.files.readText('computed.txt'), '91\n');
          }
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });
    }
  });
}
