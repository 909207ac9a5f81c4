// Upstream's code-interpreter fixtures (e2b-dev/code-interpreter,
// js/tests/setup.ts) on the unmodified `@e2b/code-interpreter` SDK: a fresh
// sandbox of the code interpreter's template per test, killed afterwards.
// `code-interpreter-v1` is the SDK's own default template name, which
// stasis maps to its `stasis-code-interpreter` image.
import { test as base } from 'vitest'
import { Sandbox, type SandboxOpts } from '@e2b/code-interpreter'

const template = process.env.E2B_TESTS_CI_TEMPLATE ?? 'code-interpreter-v1'

interface Fixture {
  sandbox: Sandbox
  template: string
  sandboxTestId: string
  sandboxOpts: Partial<SandboxOpts>
}

export const sandboxTest = base.extend<Fixture>({
  template,
  sandboxTestId: [
    // eslint-disable-next-line no-empty-pattern
    async ({}, use) => use(`test-${Math.random().toString(36).slice(2, 10)}`),
    { auto: true },
  ],
  sandboxOpts: {},
  sandbox: [
    async ({ sandboxTestId, sandboxOpts }, use) => {
      const sandbox = await Sandbox.create(template, { metadata: { sandboxTestId }, ...sandboxOpts })
      try {
        await use(sandbox)
      } finally {
        await sandbox.kill().catch(() => undefined)
      }
    },
    { auto: false },
  ],
})

/** Upstream's secure variant: envd access token required, no public traffic. */
export const secureSandboxTest = sandboxTest.extend({
  sandboxOpts: { secure: true, network: { allowPublicTraffic: false } },
})

export const isDebug = process.env.E2B_DEBUG !== undefined

export function wait(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}
