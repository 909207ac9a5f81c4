// Ported from openai-agents-js integration-tests/node.test.ts, "sandbox
// agent should run with unix-local" (MIT, see README.md): the script is
// smoke/sandbox-stasis.mjs, run by node against the suite's daemon.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, inject, test } from 'vitest';

const execFileAsync = promisify(execFile);

describe('node sandbox smoke (stasis)', () => {
  test('sandbox agent should run with stasis', { timeout: 120_000 }, async () => {
    const { baseUrl, tokenFile } = inject('stasis');
    const { stdout } = await execFileAsync(process.execPath, [join(import.meta.dirname, 'smoke', 'sandbox-stasis.mjs')], {
      env: { ...process.env, STASIS_URL: baseUrl, ...(tokenFile ? { STASIS_TOKEN_FILE: tokenFile } : {}) },
    });
    expect(stdout).toMatch(/\[SANDBOX_TOOLS\].*exec_command.*\[\/SANDBOX_TOOLS\]/s);
    expect(stdout).toContain('[SANDBOX_RESPONSE]unix-local-node:unix-local-node-command[/SANDBOX_RESPONSE]');
  });
});
