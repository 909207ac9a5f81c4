// Upstream: sandbox/internetAccess. Only the "disabled" case is ported: the
// other two expect a public site to answer (see the README).
import { assert, describe } from 'vitest'
import { CommandExitError } from 'e2b'
import { isDebug, sandboxTest } from '../setup'

describe('internet access disabled', () => {
  sandboxTest.override({ sandboxOpts: { allowInternetAccess: false } })

  sandboxTest.skipIf(isDebug)('internet access disabled', async ({ sandbox }) => {
    try {
      await sandbox.commands.run('curl --connect-timeout 3 --max-time 5 -Is https://connectivitycheck.gstatic.com/generate_204')
      assert.fail('Expected command to fail when internet access is disabled')
    } catch (error) {
      assert.isTrue(error instanceof CommandExitError)
      assert.notEqual((error as CommandExitError).exitCode, 0)
    }
  })
})
