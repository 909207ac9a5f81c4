import { assert, expect } from 'vitest'
import { TimeoutError } from 'e2b'
import { sandboxTest } from '../../setup'

sandboxTest('run', async ({ sandbox }) => {
  const r = await sandbox.commands.run('echo "Hello, World!"')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'Hello, World!\n')
})

sandboxTest('run with special characters', async ({ sandbox }) => {
  const r = await sandbox.commands.run('echo "!@#$%^&*()_+"')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, '!@#$%^&*()_+\n')
})

sandboxTest('run with multiline string', async ({ sandbox }) => {
  const r = await sandbox.commands.run('echo "Hello,\nWorld!"')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'Hello,\nWorld!\n')
})

sandboxTest('run with timeout', async ({ sandbox }) => {
  const r = await sandbox.commands.run('echo "Hello, World!"', { timeoutMs: 4000 })
  assert.equal(r.exitCode, 0)
})

sandboxTest('run with too short timeout', async ({ sandbox }) => {
  await expect(sandbox.commands.run('sleep 10', { timeoutMs: 1000 })).rejects.toThrow()
})

sandboxTest('run with too short timeout iterating', async ({ sandbox }) => {
  const h = await sandbox.commands.run('sleep 10', { timeoutMs: 2000, background: true })
  await expect(h.wait()).rejects.toThrowError(TimeoutError)
})
