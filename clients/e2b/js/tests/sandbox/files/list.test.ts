import { assert } from 'vitest'
import { sandboxTest } from '../../setup'

const PARENT = 'test_directory'
const HOME = '/home/user'

sandboxTest('list directory', async ({ sandbox }) => {
  for (const d of ['', '/subdir1', '/subdir2', '/subdir1/subdir1_1', '/subdir1/subdir1_2', '/subdir2/subdir2_1', '/subdir2/subdir2_2'])
    await sandbox.files.makeDir(`${PARENT}${d}`)
  await sandbox.files.write(`${PARENT}/file1.txt`, 'Hello, world!')

  const shallow = {
    len: 3,
    names: ['file1.txt', 'subdir1', 'subdir2'],
    types: ['file', 'dir', 'dir'],
    paths: ['file1.txt', 'subdir1', 'subdir2'],
  }
  const deep = {
    len: 7,
    names: ['file1.txt', 'subdir1', 'subdir1_1', 'subdir1_2', 'subdir2', 'subdir2_1', 'subdir2_2'],
    types: ['file', 'dir', 'dir', 'dir', 'dir', 'dir', 'dir'],
    paths: ['file1.txt', 'subdir1', 'subdir1/subdir1_1', 'subdir1/subdir1_2', 'subdir2', 'subdir2/subdir2_1', 'subdir2/subdir2_2'],
  }
  const cases: [string, number | undefined, typeof shallow][] = [
    ['default depth (1)', undefined, shallow],
    ['explicit depth 1', 1, shallow],
    ['explicit depth 2', 2, deep],
    ['explicit depth 3 (should be the same as depth 2)', 3, deep],
  ]
  for (const [name, depth, want] of cases) {
    const files = await sandbox.files.list(PARENT, depth !== undefined ? { depth } : undefined)
    assert.equal(files.length, want.len, name)
    want.paths.forEach((p, i) => {
      assert.equal(files[i].type, want.types[i], name)
      assert.equal(files[i].name, want.names[i], name)
      assert.equal(files[i].path, `${HOME}/${PARENT}/${p}`, name)
    })
  }
})

sandboxTest('list directory with invalid depth', async ({ sandbox }) => {
  await sandbox.files.makeDir(PARENT)
  try {
    await sandbox.files.list(PARENT, { depth: -1 })
    assert.fail('Expected error but none was thrown')
  } catch (err) {
    assert.include((err as Error).message, 'depth should be at least one')
  }
})

function assertFile(e: any, path: string, size: number) {
  assert.equal(e.path, `${HOME}/${path}`)
  assert.equal(e.type, 'file')
  assert.equal(e.mode, 0o644)
  assert.equal(e.permissions, '-rw-r--r--')
  assert.equal(e.owner, 'user')
  assert.equal(e.group, 'user')
  assert.equal(e.size, size)
  assert.ok(e.modifiedTime)
}

function assertDir(e: any, path: string) {
  assert.equal(e.path, `${HOME}/${path}`)
  assert.equal(e.type, 'dir')
  assert.equal(e.mode, 0o755)
  assert.equal(e.permissions, 'drwxr-xr-x')
  assert.equal(e.owner, 'user')
  assert.equal(e.group, 'user')
  assert.ok(e.modifiedTime)
}

sandboxTest('file entry details', async ({ sandbox }) => {
  const content = 'Hello, World!'
  await sandbox.files.makeDir('test-file-entry')
  await sandbox.files.write('test-file-entry/test.txt', content)
  const files = await sandbox.files.list('test-file-entry', { depth: 1 })
  assert.equal(files.length, 1)
  assert.equal(files[0].name, 'test.txt')
  assertFile(files[0], 'test-file-entry/test.txt', content.length)
  assert.isUndefined(files[0].symlinkTarget)
})

sandboxTest('directory entry details', async ({ sandbox }) => {
  await sandbox.files.makeDir('test-entry-info')
  await sandbox.files.makeDir('test-entry-info/subdir')
  const files = await sandbox.files.list('test-entry-info', { depth: 1 })
  assert.equal(files.length, 1)
  assert.equal(files[0].name, 'subdir')
  assertDir(files[0], 'test-entry-info/subdir')
})

sandboxTest('mixed entries (files and directories)', async ({ sandbox }) => {
  const content = 'Hello, World!'
  await sandbox.files.makeDir('test-mixed-entries')
  await sandbox.files.makeDir('test-mixed-entries/subdir')
  await sandbox.files.write('test-mixed-entries/test.txt', content)
  const files = await sandbox.files.list('test-mixed-entries', { depth: 1 })
  assert.equal(files.length, 2)
  const byName = new Map(files.map((e) => [e.name, e]))
  assert.ok(byName.get('subdir'))
  assertDir(byName.get('subdir'), 'test-mixed-entries/subdir')
  assert.ok(byName.get('test.txt'))
  assertFile(byName.get('test.txt'), 'test-mixed-entries/test.txt', content.length)
})
