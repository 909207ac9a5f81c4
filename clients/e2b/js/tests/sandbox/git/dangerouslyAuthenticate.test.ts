import { expect } from 'vitest'
import { sandboxTest } from '../../setup'
import { HOST, PASSWORD, PROTOCOL, USERNAME, stdoutOf } from './helpers'

sandboxTest('git dangerouslyAuthenticate sets helper', async ({ sandbox }) => {
  await sandbox.git.dangerouslyAuthenticate({ username: USERNAME, password: PASSWORD, host: HOST, protocol: PROTOCOL })
  expect(await stdoutOf(sandbox, 'git config --global --get credential.helper')).toBe('store')
  expect(await sandbox.git.getConfig('credential.helper', { scope: 'global' })).toBe('store')
})
