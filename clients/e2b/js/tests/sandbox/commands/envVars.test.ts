import { assert, describe } from 'vitest'
import { isDebug, onMicrovm, sandboxTest } from '../../setup'

describe('sandbox global env vars', () => {
  sandboxTest.override({ sandboxOpts: { envs: { FOO: 'bar' } } })

  sandboxTest.skipIf(isDebug)('sandbox global env vars', async ({ sandbox }) => {
    const r = await sandbox.commands.run('echo $FOO')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout.trim(), 'bar')
  })
})

// Its second command goes through sudo, which needs setuid: a process
// sandbox runs with no_new_privs, so it runs on the microVM backend only.
sandboxTest.skipIf(!onMicrovm)('bash command scoped env vars', async ({ sandbox }) => {
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
