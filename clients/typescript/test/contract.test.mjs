// The client's generated types and routes against the daemon's own /openapi.json.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { ROUTES } from '../dist/index.js';
import { generate } from '../scripts/openapi.mjs';
import { Daemon, PKG } from './daemon.mjs';

describe('contract', () => {
  let d;
  let spec;
  before(async () => {
    d = await new Daemon('process').start();
    spec = await (await fetch(`${d.url}/openapi.json`)).json();
  });
  after(async () => d.stop());

  it('src/generated/api.ts is what the live daemon generates', async () => {
    const committed = readFileSync(join(PKG, 'src', 'generated', 'api.ts'), 'utf8');
    const fresh = await generate(spec);
    assert.ok(
      committed === fresh,
      'src/generated/api.ts differs from the daemon\'s /openapi.json: run `npm run generate` in clients/typescript (it starts target/debug/stasis) and commit the file',
    );
  });

  it('every route the client calls is an operation of the document', () => {
    for (const [key, r] of Object.entries(ROUTES)) {
      const item = spec.paths[r.path];
      assert.ok(item, `${key}: ${r.path} is not in the document`);
      assert.ok(item[r.method], `${key}: ${r.path} has no ${r.method}`);
    }
  });

  it('every operationId is unique (code generators need it)', () => {
    const seen = new Map();
    for (const [path, item] of Object.entries(spec.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (!op || typeof op !== 'object' || !('responses' in op)) continue;
        assert.ok(op.operationId, `${method} ${path} has no operationId`);
        assert.ok(!seen.has(op.operationId), `${op.operationId}: ${seen.get(op.operationId)} and ${method} ${path}`);
        seen.set(op.operationId, `${method} ${path}`);
      }
    }
  });

  it('drift is detected: a renamed field changes the generated types', async () => {
    const s = structuredClone(spec);
    const props = s.components.schemas.ExecResponse.properties;
    props.stdout_base64 = props.stdout_b64;
    delete props.stdout_b64;
    assert.notEqual(await generate(s), await generate(spec));
  });
});
