import { expect } from 'vitest'
import { TimeoutError } from 'e2b'
import { isDebug, sandboxTest } from '../../setup'

sandboxTest.skipIf(isDebug)(
  'killing the sandbox while a command is running throws an actionable error',
  async ({ sandbox }) => {
    const h = await sandbox.commands.run('sleep 60', { background: true })
    await sandbox.kill()
    const err = await h.wait().catch((e) => e)
    expect(err).toBeInstanceOf(TimeoutError)
    // The SDK's health check finds the sandbox gone and says so.
    expect(err.message).toContain('sandbox was killed or reached its end of life')
  }
)
