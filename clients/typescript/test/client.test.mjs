// The client against a live daemon, on each backend.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';

import {
  AlreadyExists,
  ExecResult,
  InvalidState,
  Forbidden,
  InvalidArgument,
  InvalidManifest,
  NotFound,
  PortUnreachable,
  Sandbox,
  StasisClient,
  StasisError,
} from '../dist/index.js';
import { Daemon, FULL, HERE, backends } from './daemon.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

for (const backend of backends()) {
  describe(`client (${backend})`, { timeout: 900_000 }, () => {
    let d;
    let client;
    let sbx;
    before(async () => {
      d = await new Daemon(backend).start();
      client = new StasisClient(d.conn());
      sbx = await Sandbox.create({ ...d.conn(), manifest: { lifecycle: { idle_timeout_secs: 600 } } });
    });
    after(async () => {
      for (const s of await client.list().catch(() => [])) {
        if (!['destroyed', 'failed'].includes(s.state)) await s.destroy().catch(() => undefined);
      }
      await d.stop();
    });

    it('creates, connects and lists sandboxes', async () => {
      assert.match(sbx.id, /^sb-/);
      assert.equal(sbx.state, 'running');
      assert.equal(sbx.backend, backend);
      const again = await Sandbox.connect(sbx.id, d.conn());
      assert.equal(again.id, sbx.id);
      const all = await Sandbox.list(d.conn());
      assert.ok(all.some((s) => s.id === sbx.id));
      assert.ok((await client.list({ state: 'running' })).some((s) => s.id === sbx.id));
      assert.equal(await client.health(), true);
    });

    it('execs buffered: output, exit codes, stdin, env, cwd, timeouts', async () => {
      const r = await sbx.exec('echo hi; echo err >&2; exit 3');
      assert.ok(r instanceof ExecResult);
      assert.equal(r.stdout, 'hi\n');
      assert.equal(r.stderr, 'err\n');
      assert.equal(r.exitCode, 3);
      assert.equal(r.ok, false);
      assert.equal((await sbx.exec(['cat'], { stdin: 'from stdin' })).stdout, 'from stdin');
      assert.equal((await sbx.exec('echo $A', { env: { A: 'b' } })).stdout, 'b\n');
      assert.equal((await sbx.exec('pwd', { cwd: '/tmp' })).stdout, '/tmp\n');
      const slow = await sbx.exec('sleep 30', { timeoutMs: 500 });
      assert.equal(slow.timedOut, true);
      const bin = await sbx.exec(['printf', '\\377\\000']);
      assert.deepEqual([...bin.stdoutBytes], [255, 0]);
    });

    it('execs streamed, chunk by chunk', async () => {
      const events = [];
      for await (const ev of sbx.execStream('echo one; sleep 0.3; echo two >&2; echo three')) events.push(ev);
      const last = events.at(-1);
      assert.equal(last.type, 'exit');
      assert.equal(last.result.exitCode, 0);
      assert.equal(last.result.stdout, 'one\nthree\n');
      assert.equal(last.result.stderr, 'two\n');
      assert.ok(events.filter((e) => e.type === 'stdout').length >= 1);
      const seen = [];
      const r = await sbx.exec('echo a; echo b >&2', { onStdout: (s) => seen.push(['out', s]), onStderr: (s) => seen.push(['err', s]) });
      assert.equal(r.exitCode, 0);
      assert.deepEqual(seen.map((x) => x[0]).sort(), ['err', 'out']);
    });

    it('reads, writes, lists, moves and removes files', async () => {
      await sbx.files.write('dir/a.txt', 'alpha');
      await sbx.files.write('dir/run.sh', '#!/bin/sh\necho ran\n', { mode: 0o755 });
      assert.equal(await sbx.files.readText('dir/a.txt'), 'alpha');
      const bytes = new Uint8Array([0, 1, 2, 255]);
      await sbx.files.write('/tmp/b.bin', bytes);
      assert.deepEqual([...(await sbx.files.read('/tmp/b.bin'))], [...bytes]);
      const list = await sbx.files.list('dir');
      assert.deepEqual(list.map((e) => e.name).sort(), ['a.txt', 'run.sh']);
      const run = list.find((e) => e.name === 'run.sh');
      assert.equal(run.kind, 'file');
      assert.equal(run.mode & 0o777, 0o755);
      assert.equal((await sbx.exec('./dir/run.sh')).stdout, 'ran\n');
      assert.equal(await sbx.files.exists('dir/a.txt'), true);
      assert.equal(await sbx.files.exists('dir/nope'), false);
      assert.equal(await sbx.files.exists('nodir/nope'), false);
      const st = await sbx.files.stat('dir/run.sh');
      assert.equal(st.kind, 'file');
      assert.equal(st.size, '#!/bin/sh\necho ran\n'.length);
      assert.equal(st.mode & 0o777, 0o755);
      await sbx.exec('ln -sf a.txt dir/link');
      const ln = await sbx.files.stat('dir/link');
      assert.deepEqual([ln.kind, ln.symlink_target], ['symlink', 'a.txt']);
      // Ranged reads: only the bytes asked for.
      assert.equal(await sbx.files.readText('dir/a.txt', { offset: 1, length: 3 }), 'lph');
      assert.equal(await sbx.files.readText('dir/a.txt', { offset: 3 }), 'ha');
      // Exclusive writes create only.
      await assert.rejects(sbx.files.write('dir/a.txt', 'other', { exclusive: true }), (e) => e instanceof AlreadyExists && e.status === 409);
      await sbx.files.write('dir/new.txt', 'new', { exclusive: true });
      await sbx.files.mkdir('x/y/z');
      assert.equal((await sbx.files.stat('x/y/z')).kind, 'dir');
      await assert.rejects(sbx.files.mkdir('x/y/z', { parents: false }), AlreadyExists);
      await sbx.files.rename('dir/a.txt', 'x/a.txt');
      assert.equal(await sbx.files.readText('x/a.txt'), 'alpha');
      await assert.rejects(sbx.files.remove('x'), InvalidState);
      await sbx.files.remove('x', { recursive: true });
      assert.equal(await sbx.files.exists('x'), false);
      await assert.rejects(sbx.files.stat('x'), NotFound);
      await assert.rejects(sbx.files.read('missing.txt'), NotFound);
    });

    it('watches a directory for changes', async () => {
      await sbx.files.mkdir('watched');
      const ac = new AbortController();
      const seen = [];
      const watching = (async () => {
        try {
          for await (const ev of sbx.files.watch('watched', { signal: ac.signal })) {
            seen.push(ev);
            if (seen.some((e) => e.path === 'w.txt')) break;
          }
        } catch (e) {
          if (e.code !== 'unsupported') throw e;
          seen.push({ unsupported: true });
        }
      })();
      const deadline = Date.now() + 30_000;
      while (seen.length === 0 && Date.now() < deadline) {
        await sbx.files.write(`watched/w.txt`, `t${Date.now()}`);
        await sleep(300);
      }
      ac.abort();
      await watching;
      if (!seen[0]?.unsupported) assert.ok(seen.some((e) => e.path === 'w.txt' && ['created', 'modified'].includes(e.kind)), JSON.stringify(seen));
    });

    it('labels, filters and pages sandboxes; changes the lifecycle at runtime', async () => {
      const t0 = Date.now() - 1;
      const a = await client.create({ manifest: { lifecycle: { idle_timeout_secs: 600 } }, labels: { team: 'ts', n: '1' } });
      const b = await client.create({ manifest: { lifecycle: { idle_timeout_secs: 600 } }, labels: { team: 'ts', n: '2' } });
      assert.deepEqual(a.info.labels, { team: 'ts', n: '1' });
      const mine = await client.list({ labels: { team: 'ts' } });
      assert.deepEqual(mine.map((s) => s.id).sort(), [a.id, b.id].sort());
      assert.deepEqual((await client.list({ labels: { team: 'ts', n: '2' } })).map((s) => s.id), [b.id]);
      assert.ok((await client.list({ createdAfter: new Date(t0) })).every((s) => s.info.created_at_ms > t0));
      const p1 = await client.listPage({ labels: { team: 'ts' }, limit: 1 });
      assert.equal(p1.sandboxes.length, 1);
      assert.ok(p1.nextCursor);
      const p2 = await client.listPage({ labels: { team: 'ts' }, limit: 1, cursor: p1.nextCursor });
      assert.equal(p2.sandboxes.length, 1);
      assert.notEqual(p2.sandboxes[0].id, p1.sandboxes[0].id);
      await a.setLifecycle({ idleTimeoutSecs: 900 });
      assert.equal(a.info.manifest.lifecycle.idle_timeout_secs, 900);
      await a.setTimeout(3600);
      assert.ok(a.info.manifest.lifecycle.max_lifetime_secs >= 3600);
      await a.destroy();
      await b.destroy();
    });

    it('runs persistent sessions and terminals', async () => {
      const s = await sbx.sessions.start(['sh', '-c', 'read line; echo got:$line; exit 7']);
      assert.equal(s.info.running, true);
      await s.write('hello\n');
      assert.equal(await s.wait(30_000), 7);
      let out = '';
      while (!s.ended) out += Buffer.from(await s.read(1000)).toString();
      assert.equal(out, 'got:hello\n');
      assert.ok((await sbx.sessions.list()).some((i) => i.id === s.id));

      const pty = await sbx.pty(['sh'], { cols: 100, rows: 30 });
      assert.deepEqual(pty.info.pty, { cols: 100, rows: 30 });
      await pty.write('stty size; tty\n');
      let text = '';
      const deadline = Date.now() + 30_000;
      while (!text.includes('30 100') && Date.now() < deadline) text += Buffer.from(await pty.read(1000)).toString();
      assert.match(text, /30 100/);
      await pty.resize(120, 40);
      await pty.write('stty size\n');
      while (!text.includes('40 120') && Date.now() < deadline) text += Buffer.from(await pty.read(1000)).toString();
      assert.match(text, /40 120/);
      assert.match(pty.attachUrl(5), /^ws:\/\/.*\/sessions\/.*\/attach\?offset=5$/);
      await pty.kill();
    });

    it('attaches to a terminal over the WebSocket', async () => {
      // The global WebSocket: built in from Node 22, behind a flag on Node 20.
      const flags = typeof WebSocket === 'undefined' ? ['--experimental-websocket'] : [];
      const { stdout } = await promisify(execFile)(process.execPath, [...flags, join(HERE, 'attach_flow.mjs'), sbx.id], {
        env: { ...process.env, ...d.env() },
        timeout: 120_000,
      });
      const r = JSON.parse(stdout.trim().split('\n').at(-1));
      assert.deepEqual(r, { end: { type: 'exit', code: 3 }, sawSize: true, sawEcho: true });
      if (typeof WebSocket === 'undefined') {
        // Without one, attach says what it needs.
        const s = await sbx.pty(['sh']);
        await assert.rejects(s.attach(), (e) => e.code === 'unsupported' && /WebSocket/.test(e.message));
        await s.kill();
      }
    });

    it('pauses, resumes, snapshots, forks and restores', async () => {
      const s = await client.create({ manifest: { lifecycle: { idle_timeout_secs: 600 } } });
      await s.files.write('state.txt', 'before');
      await s.pause();
      assert.equal(s.state, 'paused');
      await s.resume();
      assert.equal(s.state, 'running');
      assert.equal(await s.files.readText('state.txt'), 'before');
      const snap = await s.snapshot();
      assert.match(snap.id, /^snap-/);
      assert.equal((await client.snapshots.get(snap.id)).source_sandbox, s.id);
      assert.ok((await client.snapshots.list()).some((x) => x.id === snap.id));
      await s.files.write('state.txt', 'after');
      const restored = await client.snapshots.restore(snap.id);
      assert.notEqual(restored.id, s.id);
      assert.equal(restored.info.source_snapshot, snap.id);
      assert.equal(await restored.files.readText('state.txt'), 'before');
      const fork = await s.fork(backend === 'process' || FULL ? 2 : 1);
      assert.equal(fork.sandboxes.length, backend === 'process' || FULL ? 2 : 1);
      for (const child of fork.sandboxes) assert.equal(await child.files.readText('state.txt'), 'after');
      // A paused sandbox resumes on its next request.
      await s.pause();
      assert.equal((await s.exec('cat state.txt')).stdout, 'after');
      for (const x of [restored, ...fork.sandboxes, s]) await x.destroy();
      assert.equal(s.state, 'destroyed');
    });

    it('throws typed errors by the server codes', async () => {
      await assert.rejects(client.get('sb-00000000000000000000000000'), (e) => e instanceof NotFound && e.status === 404 && e.code === 'not_found');
      await assert.rejects(client.create({ manifest: { backend: 'nope' } }), (e) => e instanceof InvalidArgument && e instanceof StasisError);
      await assert.rejects(client.create({ manifest: { resources: { memory_mb: 'x' } } }), (e) => e instanceof InvalidManifest || e instanceof InvalidArgument);
      await assert.rejects(sbx.exec(['true'], { env: { 'A=B': 'c' } }), InvalidArgument);
      const bad = new StasisClient({ baseUrl: 'http://127.0.0.1:1' });
      await assert.rejects(bad.list(), (e) => e.code === 'connection_failed');
    });

    it('exposes ports by token and by signed URL', async () => {
      await sbx.exec('mkdir -p www && echo hello-port > www/hello.txt');
      await sbx.sessions.start(['python3', '-m', 'http.server', '8000', '--bind', '0.0.0.0', '--directory', 'www']);
      let r;
      const deadline = Date.now() + 60_000;
      for (;;) {
        try {
          r = await sbx.ports.fetch(8000, '/hello.txt');
          break;
        } catch (e) {
          if (!(e instanceof PortUnreachable) || Date.now() > deadline) throw e;
          await sleep(200);
        }
      }
      assert.equal(r.status, 200);
      assert.equal(await r.text(), 'hello-port\n');
      const u = await sbx.ports.url(8000, { ttlSecs: 60 });
      assert.match(u.path, /^\/p\//);
      assert.equal((await (await fetch(`${u.url}hello.txt`)).text()), 'hello-port\n');
      await sbx.ports.revoke(8000, u.id);
      const gone = await fetch(`${u.url}hello.txt`);
      assert.equal(gone.status, 403);
      await assert.rejects(sbx.ports.url(0), InvalidArgument);
      await assert.rejects(sbx.ports.fetch(9, '/'), PortUnreachable);
      await assert.rejects(
        (async () => {
          const resp = await fetch(`${u.url}x`);
          if (resp.status === 403) throw new Forbidden('revoked');
        })(),
        Forbidden,
      );
    });

    it('records idempotent tool calls and approvals in runs', async () => {
      const run = await client.runs.create(sbx.id);
      assert.match(run.id, /^run-/);
      const first = await run.call('k1', 'echo once >> calls.log');
      assert.equal(first.outcome, 'succeeded');
      assert.equal(first.replayed, false);
      const again = await run.call('k1', 'echo once >> calls.log');
      assert.equal(again.replayed, true);
      assert.equal(await sbx.files.readText('calls.log'), 'once\n');

      const held = await run.call('k2', 'echo approved >> calls.log', { requiresApproval: true });
      assert.equal(held.outcome, 'awaiting_approval');
      const doc = await run.state();
      const report = await client.runs.resume(doc);
      assert.deepEqual(report.still_pending, [held.call.id]);
      const ok = await run.approve(held.call.id, 'fine');
      assert.equal(ok.outcome, 'succeeded');
      const held2 = await run.call('k3', 'echo never >> calls.log', { requiresApproval: true });
      const no = await run.reject(held2.call.id, 'no');
      assert.equal(no.outcome, 'rejected');
      assert.equal(await sbx.files.readText('calls.log'), 'once\napproved\n');
      await run.step('completed', { note: 'done' });
      const data = (await client.runs.get(run.id)).data;
      assert.deepEqual(
        data.tool_calls.map((c) => [c.idempotency_key, c.state]),
        [['k1', 'succeeded'], ['k2', 'succeeded'], ['k3', 'rejected']],
      );
    });
  });
}
