// Ported from openai-agents-js packages/agents-core/test/sandboxes/unixLocal.process.test.ts
// (MIT, see README.md): the UnixLocal construction is replaced by the stasis
// provider; every behavioural assertion is kept.
import { afterAll, describe, expect, it } from 'vitest';
import { Manifest } from '@openai/agents/sandbox';
import { box, collectActiveCommandOutput, destroyAll, stasisSandboxClient, waitForOutputContaining, writeUntilExit } from './harness.js';

afterAll(destroyAll);

describe('StasisSandboxClient process sessions (UnixLocal suite)', () => {
  it('allocates a PTY for tty commands', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    const initialOutput = await session.execCommand({
      cmd: 'test -t 0 && printf "tty yes\\n" || printf "tty no\\n"',
      shell: '/bin/sh',
      login: false,
      tty: true,
      yieldTimeMs: 1_000,
    });
    const output = await collectActiveCommandOutput(session, initialOutput);
    expect(output).toContain('Process exited with code 0');
    expect(output).toContain('tty yes');
    expect(output).not.toContain('tty no');
  });

  it('checks relative PTY Python executables from the command cwd', async () => {
    // UnixLocal bridges PTYs through Python; stasis has real terminals, so
    // the variable the test sets is ignored and the assertions hold as is.
    const originalPython = process.env.OPENAI_AGENTS_PYTHON;
    try {
      const client = stasisSandboxClient();
      const session = await client.create(new Manifest());
      await box(session).symlink('/usr/bin/python3', '/workspace/python3');
      process.env.OPENAI_AGENTS_PYTHON = './python3';
      const output = await session.execCommand({
        cmd: 'test -t 0 && printf "tty yes\\n" || printf "tty no\\n"',
        shell: '/bin/sh',
        login: false,
        tty: true,
        yieldTimeMs: 1_000,
      });
      const finalOutput = await collectActiveCommandOutput(session, output);
      expect(finalOutput).toContain('Process exited with code 0');
      expect(finalOutput).toContain('tty yes');
      expect(finalOutput).not.toContain('tty no');
    } finally {
      if (originalPython === undefined) delete process.env.OPENAI_AGENTS_PYTHON;
      else process.env.OPENAI_AGENTS_PYTHON = originalPython;
    }
  });

  it('supports interactive sessions with write_stdin', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    const started = await session.execCommand({
      cmd: 'read value; printf "%s\\n" "$value"',
      shell: '/bin/sh',
      login: false,
      tty: true,
      yieldTimeMs: 0,
    });
    const sessionId = Number(started.match(/Process running with session ID (\d+)/)?.[1]);
    const finished = await writeUntilExit(session, sessionId, 'hello stdin\n');
    expect(started).toContain('Process running with session ID');
    expect(finished).toContain('Process exited with code 0');
    expect(finished).toContain('hello stdin');
  });

  it('waits for final output after observing process completion', async () => {
    // Upstream drives a fake child through a UnixLocal subclass hook; here a
    // real command prints right before it exits, after the first poll.
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    const started = await session.execCommand({
      cmd: 'sleep 0.3; printf "late stdout\\n"',
      shell: '/bin/sh',
      login: false,
      tty: true,
      yieldTimeMs: 0,
    });
    const sessionId = Number(started.match(/Process running with session ID (\d+)/)?.[1]);
    expect(Number.isFinite(sessionId)).toBe(true);
    const finished = await writeUntilExit(session, sessionId, '');
    expect(finished).toContain('Process exited with code 0');
    expect(finished).toContain('late stdout');
  });

  it('returns buffered PTY output when yielding an active session', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    const started = await session.execCommand({
      cmd: 'printf "prompt> "; sleep 1; read value; printf "received:%s\\n" "$value"',
      shell: '/bin/sh',
      login: false,
      tty: true,
      yieldTimeMs: 500,
    });
    const sessionId = Number(started.match(/Process running with session ID (\d+)/)?.[1]);
    const bufferedOutput = started.includes('prompt>') ? started : await waitForOutputContaining(session, sessionId, 'prompt>');
    const polled = await session.writeStdin({ sessionId, yieldTimeMs: 50 });
    const finished = await writeUntilExit(session, sessionId, 'hello stdin\n');
    expect(started).toContain('Process running with session ID');
    expect(bufferedOutput).toContain('prompt>');
    expect(polled).not.toContain('prompt>');
    expect(finished).toContain('Process exited with code 0');
    expect(finished).toContain('received:hello stdin');
  });

  it('honors yieldTimeMs for non-tty commands', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    const started = await session.execCommand({ cmd: 'sleep 0.2; printf "done\\n"', shell: '/bin/sh', login: false, yieldTimeMs: 0 });
    const sessionId = Number(started.match(/Process running with session ID (\d+)/)?.[1]);
    const finished = await writeUntilExit(session, sessionId, '');
    expect(started).toContain('Process running with session ID');
    expect(finished).toContain('Process exited with code 0');
    expect(finished).toContain('done');
  });

  it('reports SIGINT-terminated non-tty commands as failures', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    const started = await session.execCommand({ cmd: 'read value', shell: '/bin/sh', login: false, yieldTimeMs: 0 });
    const sessionId = Number(started.match(/Process running with session ID (\d+)/)?.[1]);
    const interrupted = await session.writeStdin({ sessionId, chars: '\u0003', yieldTimeMs: 1_000 });
    expect(started).toContain('Process running with session ID');
    expect(interrupted).toContain('Process exited with code 130');
  });

  it('returns only unread output from active sessions', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    const started = await session.execCommand({
      cmd: 'printf "ready\\n"; read value; printf "done\\n"',
      shell: '/bin/sh',
      login: false,
      yieldTimeMs: 50,
    });
    const sessionId = Number(started.match(/Process running with session ID (\d+)/)?.[1]);
    const readyOutput = started.includes('ready') ? started : await waitForOutputContaining(session, sessionId, 'ready');
    const polled = await session.writeStdin({ sessionId, yieldTimeMs: 50 });
    const finished = await writeUntilExit(session, sessionId, 'continue\n');
    expect(readyOutput).toContain('ready');
    expect(polled).not.toContain('ready');
    expect(finished).toContain('done');
    expect(finished).not.toContain('ready');
  });

  it('caps unread active session output', async () => {
    const client = stasisSandboxClient();
    const session = await client.create(new Manifest());
    const started = await session.execCommand({
      cmd: 'sleep 0.1; yes output | head -c 2500000; sleep 2',
      shell: '/bin/sh',
      login: false,
      yieldTimeMs: 10,
    });
    const sessionId = Number(started.match(/Process running with session ID (\d+)/)?.[1]);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const output = await session.writeStdin({ sessionId, chars: '', yieldTimeMs: 1_000, maxOutputTokens: 20 });
    expect(output).toContain('characters truncated from process output');
    expect(output.length).toBeLessThan(2_000);
    const finalOutput = output.includes('Process exited with code') ? output : await writeUntilExit(session, sessionId, '');
    expect(finalOutput).toContain('Process exited with code 0');
  });
});
