import { assert } from 'vitest'
import { sandboxTest } from '../../setup'

sandboxTest('list processes', async ({ sandbox }) => {
  await sandbox.commands.run('sleep 10', { background: true })
  await sandbox.commands.run('sleep 10', { background: true })
  const procs = await sandbox.commands.list()
  assert.isArray(procs)
  assert.isAtLeast(procs.length, 2)
  for (const p of procs) assert.containsAllKeys(p, ['pid'])
})
