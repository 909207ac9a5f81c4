import { expect } from 'vitest'
import { ProcessExitError } from 'e2b'
import { sandboxTest } from '../../setup'

sandboxTest('kill process', async ({ sandbox }) => {
  const h = await sandbox.commands.run('sleep 10', { background: true })
  await sandbox.commands.kill(h.pid)
  await expect(sandbox.commands.run(`kill -0 ${h.pid}`)).rejects.toThrowError(ProcessExitError)
})

sandboxTest('kill non-existing process', async ({ sandbox }) => {
  await expect(sandbox.commands.kill(999999)).resolves.toBe(false)
})
