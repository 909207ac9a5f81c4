// The one generation of the API types from an OpenAPI document (used by
// scripts/generate.mjs and the contract test).
import openapiTS, { astToString } from 'openapi-typescript';

const HEADER = `/**
 * Generated from the stasis daemon's /openapi.json by openapi-typescript
 * (npm run generate). Do not edit: test/contract.test.mjs regenerates it
 * from a live daemon and fails when it differs.
 */

`;

export async function generate(doc) {
  const ast = await openapiTS(doc, { alphabetize: true });
  return HEADER + astToString(ast);
}
