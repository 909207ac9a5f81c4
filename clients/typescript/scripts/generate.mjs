// Regenerate src/generated/api.ts from a daemon's /openapi.json:
//   node scripts/generate.mjs [URL | FILE]   (default $STASIS_URL, else http://127.0.0.1:7070)
// The contract test runs the same generation against a live daemon and
// compares the result with the committed file.
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

import { generate } from './openapi.mjs';

const src = process.argv[2] ?? process.env.STASIS_URL ?? 'http://127.0.0.1:7070';
const doc = src.startsWith('http')
  ? await (await fetch(`${src.replace(/\/+$/, '')}/openapi.json`)).json()
  : JSON.parse(await readFile(src, 'utf8'));
const out = fileURLToPath(new URL('../src/generated/api.ts', import.meta.url));
await writeFile(out, await generate(doc));
console.log(`wrote ${out}`);
