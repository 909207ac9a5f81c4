// The Agents SDK's own sandbox tests, ported onto the stasis provider (see
// README.md). One daemon per vitest run (globalSetup.mjs), one backend per
// run: run.mjs runs this config once per backend.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    root: new URL('.', import.meta.url).pathname,
    include: ['**/*.test.ts'],
    globalSetup: ['./globalSetup.mjs'],
    // Few sandboxes at a time on a shared machine: files run one after another.
    fileParallelism: false,
    testTimeout: 180_000,
    hookTimeout: 180_000,
  },
});
