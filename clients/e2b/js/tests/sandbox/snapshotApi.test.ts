// Upstream: sandbox/snapshot-api (named snapshots of a running sandbox,
// sandboxes created from them).
import { assert } from 'vitest'
import { Sandbox } from 'e2b'
import { isDebug, sandboxTest } from '../setup'

const only = sandboxTest.skipIf(isDebug)

only('create a snapshot from sandbox', async ({ sandbox }) => {
  await sandbox.files.write('/home/user/test.txt', 'snapshot test content')
  const snap = await sandbox.createSnapshot()
  assert.isString(snap.snapshotId)
  assert.isTrue(snap.snapshotId.length > 0)
  await Sandbox.deleteSnapshot(snap.snapshotId)
})

only('create sandbox from snapshot', async ({ sandbox, sandboxTestId }) => {
  await sandbox.files.write('/home/user/test.txt', 'content from original sandbox')
  const snap = await sandbox.createSnapshot()
  try {
    const child = await Sandbox.create(snap.snapshotId, { metadata: { sandboxTestId: `${sandboxTestId}-from-snapshot` } })
    try {
      assert.equal(await child.files.read('/home/user/test.txt'), 'content from original sandbox')
    } finally {
      await child.kill()
    }
  } finally {
    await Sandbox.deleteSnapshot(snap.snapshotId)
  }
})

only('create multiple sandboxes from same snapshot', async ({ sandbox, sandboxTestId }) => {
  const shared = 'shared snapshot content'
  await sandbox.files.write('/home/user/shared.txt', shared)
  const snap = await sandbox.createSnapshot()
  try {
    const a = await Sandbox.create(snap.snapshotId, { metadata: { sandboxTestId: `${sandboxTestId}-branch-1` } })
    const b = await Sandbox.create(snap.snapshotId, { metadata: { sandboxTestId: `${sandboxTestId}-branch-2` } })
    try {
      assert.equal(await a.files.read('/home/user/shared.txt'), shared)
      assert.equal(await b.files.read('/home/user/shared.txt'), shared)
      await a.files.write('/home/user/shared.txt', 'modified in sandbox1')
      assert.equal(await a.files.read('/home/user/shared.txt'), 'modified in sandbox1')
      assert.equal(await b.files.read('/home/user/shared.txt'), shared)
    } finally {
      await a.kill()
      await b.kill()
    }
  } finally {
    await Sandbox.deleteSnapshot(snap.snapshotId)
  }
})

only('list snapshots', async ({ sandbox }) => {
  const snap = await sandbox.createSnapshot()
  try {
    const pages = Sandbox.listSnapshots()
    assert.isTrue(pages.hasNext)
    const snaps = await pages.nextItems()
    assert.isArray(snaps)
    assert.isDefined(snaps.find((s) => s.snapshotId === snap.snapshotId))
  } finally {
    await Sandbox.deleteSnapshot(snap.snapshotId)
  }
})

only('list snapshots for specific sandbox', async ({ sandbox }) => {
  const snap = await sandbox.createSnapshot()
  try {
    const snaps = await sandbox.listSnapshots().nextItems()
    assert.isDefined(snaps.find((s) => s.snapshotId === snap.snapshotId))
  } finally {
    await Sandbox.deleteSnapshot(snap.snapshotId)
  }
})

only('create a named snapshot', async ({ sandbox, sandboxTestId }) => {
  const name = `snap-${sandboxTestId}`
  const snap = await sandbox.createSnapshot({ name })
  try {
    assert.isString(snap.snapshotId)
    assert.isArray(snap.names)
    assert.isTrue(snap.names.length > 0)
    assert.isTrue(snap.names.some((n) => n.includes(name)))
  } finally {
    await Sandbox.deleteSnapshot(snap.snapshotId)
  }
})

only('list snapshots filtered by name', async ({ sandbox, sandboxTestId }) => {
  const name = `snap-filter-${sandboxTestId}`
  const snap = await sandbox.createSnapshot({ name })
  try {
    const found = await Sandbox.listSnapshots({ name }).nextItems()
    assert.isDefined(found.find((s) => s.snapshotId === snap.snapshotId))
    const none = await Sandbox.listSnapshots({ name: `${name}-does-not-exist` }).nextItems()
    assert.isArray(none)
    assert.equal(none.length, 0)
  } finally {
    await Sandbox.deleteSnapshot(snap.snapshotId)
  }
})

only('delete snapshot', async ({ sandbox }) => {
  const snap = await sandbox.createSnapshot()
  assert.isTrue(await Sandbox.deleteSnapshot(snap.snapshotId))
  assert.isFalse(await Sandbox.deleteSnapshot(snap.snapshotId))
})

only('snapshot preserves file system state', async ({ sandbox, sandboxTestId }) => {
  const app = '/home/user/app'
  await sandbox.files.makeDir(app)
  await sandbox.files.write(`${app}/config.json`, '{"env": "test"}')
  await sandbox.files.write(`${app}/data.txt`, 'important data')
  const snap = await sandbox.createSnapshot()
  try {
    const child = await Sandbox.create(snap.snapshotId, { metadata: { sandboxTestId: `${sandboxTestId}-fs-test` } })
    try {
      assert.isTrue(await child.files.exists(app))
      assert.equal(await child.files.read(`${app}/config.json`), '{"env": "test"}')
      assert.equal(await child.files.read(`${app}/data.txt`), 'important data')
    } finally {
      await child.kill()
    }
  } finally {
    await Sandbox.deleteSnapshot(snap.snapshotId)
  }
})
