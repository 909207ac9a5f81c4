// Runs the ported Agents SDK suite once per backend, each on its own daemon:
// `process` always; `microvm` when STASIS_IMAGE_DIR names a guest image,
// bounded to the files in MICROVM_FILES unless STASIS_TS_TESTS_FULL=1 (a VM
// per sandbox under TCG is slow). Prints `# pass N` / `# fail N` per backend
// (scripts/test.sh adds them to its total) and exits non-zero on a failure.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HERE as TEST_DIR } from '../test/daemon.mjs';

const SUITE = join(TEST_DIR, '..', 'sdk_suite');
const PKG = join(SUITE, '..');
const MICROVM_FILES = ['session.test.ts', 'process.test.ts', 'snapshot.test.ts'];
const MICROVM_FILTER =
  process.env.STASIS_SDK_SUITE_MICROVM_FILTER ??
  'materializes manifest entries|structured exec|symlink escapes in filesystem|persists and hydrates|SIGINT-terminated|drifted live workspace';

const backends = ['process'];
const img = process.env.STASIS_IMAGE_DIR;
if (img && existsSync(img) && process.env.STASIS_SDK_SUITE_MICROVM !== '0') backends.push('microvm');
const only = process.argv.slice(2);

let failed = 0;
for (const backend of backends) {
  const out = mkdtempSync(join(tmpdir(), 'stasis-sdk-suite-'));
  const json = join(out, 'result.json');
  const args = ['vitest', 'run', '--config', join(SUITE, 'vitest.config.mjs'), '--reporter=default', '--reporter=json', `--outputFile.json=${json}`];
  if (backend === 'microvm' && process.env.STASIS_TS_TESTS_FULL !== '1') args.push(...MICROVM_FILES, '-t', MICROVM_FILTER);
  else args.push(...only);
  console.log(`# sdk suite on ${backend}: npx ${args.join(' ')}`);
  const r = spawnSync('npx', args, { cwd: PKG, stdio: 'inherit', env: { ...process.env, STASIS_SDK_SUITE_BACKEND: backend } });
  let pass = 0;
  let fail = 0;
  try {
    const res = JSON.parse(readFileSync(json, 'utf8'));
    pass = res.numPassedTests;
    fail = res.numFailedTests;
  } catch {
    fail = 1;
  }
  if (r.status !== 0 && fail === 0) fail = 1;
  console.log(`# sdk suite ${backend}`);
  console.log(`# pass ${pass}`);
  console.log(`# fail ${fail}`);
  failed += fail;
  rmSync(out, { recursive: true, force: true });
}
process.exit(failed > 0 ? 1 : 0);
