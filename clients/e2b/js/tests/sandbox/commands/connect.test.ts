import { assert, expect } from 'vitest'
import { sandboxTest } from '../../setup'

sandboxTest('connect to process', async ({ sandbox }) => {
  const h = await sandbox.commands.run('sleep 10', { background: true })
  const again = await sandbox.commands.connect(h.pid)
  assert.isObject(again)
  assert.equal(again.pid, h.pid)
})

sandboxTest('connect to non-existing process', async ({ sandbox }) => {
  await expect(sandbox.commands.connect(999999)).rejects.toThrowError()
})
