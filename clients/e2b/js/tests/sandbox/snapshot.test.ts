// Upstream: sandbox/snapshot (pause and resume). The http-server case and
// the filesystem-only pause are named in the README (not ported).
import { assert, describe } from 'vitest'
import { isDebug, sandboxTest } from '../setup'

const only = sandboxTest.skipIf(isDebug)

only('pause and resume a sandbox', async ({ sandbox }) => {
  assert.isTrue(await sandbox.isRunning())
  await sandbox.pause()
  assert.isFalse(await sandbox.isRunning())
  const resumed = await sandbox.connect()
  assert.equal(resumed.sandboxId, sandbox.sandboxId)
  assert.isTrue(await sandbox.isRunning())
})

describe('pause and resume with env vars', () => {
  sandboxTest.override({ sandboxOpts: { envs: { TEST_VAR: 'sfisback' } } })

  only('pause and resume a sandbox with env vars', async ({ sandbox }) => {
    const before = await sandbox.commands.run('echo "$TEST_VAR"')
    assert.equal(before.exitCode, 0)
    assert.equal(before.stdout.trim(), 'sfisback')
    await sandbox.pause()
    assert.isFalse(await sandbox.isRunning())
    const resumed = await sandbox.connect()
    assert.isTrue(await sandbox.isRunning())
    assert.isTrue(await resumed.isRunning())
    assert.equal(resumed.sandboxId, sandbox.sandboxId)
    const after = await sandbox.commands.run('echo "$TEST_VAR"')
    assert.equal(after.exitCode, 0)
    assert.equal(after.stdout.trim(), 'sfisback')
  })
})

only('pause and resume a sandbox with file', async ({ sandbox }) => {
  const name = 'test_snapshot.txt'
  const content = 'This is a snapshot test file.'
  const info = await sandbox.files.write(name, content)
  assert.equal(info.name, name)
  assert.equal(info.type, 'file')
  assert.equal(info.path, `/home/user/${name}`)
  assert.isTrue(await sandbox.files.exists(name))
  assert.equal(await sandbox.files.read(name), content)
  await sandbox.pause()
  assert.isFalse(await sandbox.isRunning())
  await sandbox.connect()
  assert.isTrue(await sandbox.isRunning())
  assert.isTrue(await sandbox.files.exists(name))
  assert.equal(await sandbox.files.read(name), content)
})

only('pause and resume a sandbox with ongoing long running process', async ({ sandbox }) => {
  const h = await sandbox.commands.run('sleep 3600', { background: true })
  await sandbox.pause()
  assert.isFalse(await sandbox.isRunning())
  await sandbox.connect()
  assert.isTrue(await sandbox.isRunning())
  const list = await sandbox.commands.list()
  assert.isTrue(list.some((c) => c.pid === h.pid))
  const again = await sandbox.commands.connect(h.pid)
  assert.isObject(again)
  assert.equal(again.pid, h.pid)
})

only('pause and resume a sandbox with completed long running process', async ({ sandbox }) => {
  const name = 'test_long_running.txt'
  await sandbox.commands.run(`sleep 2 && echo "done" > /home/user/${name}`, { background: true })
  assert.isFalse(await sandbox.files.exists(name))
  await sandbox.pause()
  assert.isFalse(await sandbox.isRunning())
  await sandbox.connect()
  assert.isTrue(await sandbox.isRunning())
  await new Promise((r) => setTimeout(r, 2000))
  assert.isTrue(await sandbox.files.exists(name))
  assert.equal((await sandbox.files.read(name)).trim(), 'done')
})
