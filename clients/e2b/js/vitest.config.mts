import { defineConfig } from 'vitest/config'

// One stasis daemon for the whole run (tests/globalSetup.ts), its address
// and a tenant token handed to the E2B SDK through the SDK's own
// environment variables; test files run one at a time (the machine's cores
// are shared with the daemon's sandboxes).
export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    globalSetup: ['tests/globalSetup.ts'],
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    isolate: true,
    environment: 'node',
  },
})
