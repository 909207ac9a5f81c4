import { assert, describe } from 'vitest'
import { isDebug, sandboxTest } from '../../setup'

describe('sandbox global env vars', () => {
  sandboxTest.override({ sandboxOpts: { envs: { FOO: 'bar' } } })

  sandboxTest.skipIf(isDebug)('sandbox global env vars', async ({ sandbox }) => {
    const r = await sandbox.commands.run('echo $FOO')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout.trim(), 'bar')
  })
})

sandboxTest('bash command scoped env vars', async ({ sandbox }) => {
  const r = await sandbox.commands.run('echo $FOO', { envs: { FOO: 'bar' } })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout.trim(), 'bar')
  // Scoped to that command: a later one (through sudo, as upstream) has none.
  const later = await sandbox.commands.run('sudo echo "$FOO"')
  assert.equal(later.exitCode, 0)
  assert.equal(later.stdout.trim(), '')
})

sandboxTest('python command scoped env vars', async ({ sandbox }) => {
  const r = await sandbox.commands.run(`python3 -c "import os; print(os.environ['FOO'])"`, {
    envs: { FOO: 'bar' },
  })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout.trim(), 'bar')
})
