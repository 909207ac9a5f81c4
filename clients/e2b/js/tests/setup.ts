// The fixtures the upstream E2B tests use, under the same names, built on
// the unmodified SDK: `sandboxTest` gives each test a fresh sandbox made
// from `template` with `sandboxOpts` (overridable per describe block) and
// kills it afterwards. Only how the sandbox is configured differs from
// upstream: the SDK reads the daemon's address and key from the
// environment globalSetup sets.
import { test as base } from 'vitest'
import { Sandbox, type SandboxOpts } from 'e2b'
import { template } from './template'

interface SandboxFixture {
  sandbox: Sandbox
  template: string
  sandboxTestId: string
  sandboxOpts: Partial<SandboxOpts>
}

function randomSuffix(): string {
  return Math.random().toString(36).slice(2, 10)
}

export const sandboxTest = base.extend<SandboxFixture>({
  template,
  sandboxTestId: [
    // eslint-disable-next-line no-empty-pattern
    async ({}, use) => use(`test-${randomSuffix()}`),
    { auto: true },
  ],
  sandboxOpts: {},
  sandbox: [
    async ({ sandboxTestId, sandboxOpts }, use) => {
      const sandbox = await Sandbox.create(template, {
        metadata: { sandboxTestId },
        ...sandboxOpts,
      })
      try {
        await use(sandbox)
      } finally {
        // A test may have killed it already.
        await sandbox.kill().catch(() => undefined)
      }
    },
    { auto: false },
  ],
})

/** Upstream skips some tests against a local envd; stasis is never that. */
export const isDebug = process.env.E2B_DEBUG !== undefined

/** Tests that need what a stasis daemon in CI cannot offer (named in README). */
export const onMicrovm = process.env.STASIS_E2B_BACKEND === 'microvm'

/**
 * Tests of what stasis does not offer (each named, with its reason, in the
 * README's mapping table), kept whole and run as expected failures
 * (vitest's `fails`, like pytest's strict xfail): the day one passes, the
 * suite says so and the mark comes off.
 */
export const notSupported = sandboxTest.fails

export function wait(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}

export { template }
