// Regenerate src/generated/api.ts from a daemon's /openapi.json:
//   node scripts/generate.mjs              # starts $STASIS_BIN (else ../../target/debug/stasis) on a temp dir
//   node scripts/generate.mjs URL | FILE   # a running daemon, or a saved document
// The contract test runs the same generation against a live daemon and
// compares the result with the committed file.
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

import { Daemon } from '../test/daemon.mjs';
import { generate } from './openapi.mjs';

const src = process.argv[2];
let doc;
if (!src) {
  const d = await new Daemon('process').start();
  try {
    doc = await (await fetch(`${d.url}/openapi.json`)).json();
  } finally {
    await d.stop();
  }
} else if (src.startsWith('http')) {
  doc = await (await fetch(`${src.replace(/\/+$/, '')}/openapi.json`)).json();
} else {
  doc = JSON.parse(await readFile(src, 'utf8'));
}
const out = fileURLToPath(new URL('../src/generated/api.ts', import.meta.url));
await writeFile(out, await generate(doc));
console.log(`wrote ${out}`);
