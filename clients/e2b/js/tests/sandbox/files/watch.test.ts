import { expect } from 'vitest'
import {
  FileNotFoundError,
  type FilesystemEvent,
  FilesystemEventType,
  FileType,
  SandboxError,
} from 'e2b'
import { sandboxTest } from '../../setup'

const CONTENT = 'This file will be watched.'
const CHANGED = 'This file has been modified.'

/** A promise and the function that settles it with an event. */
function signal<T = void>(): [Promise<T>, (v: T) => void] {
  let fire!: (v: T) => void
  const p = new Promise<T>((r) => (fire = r))
  return [p, fire]
}

for (const [name, opts] of [
  ['watch directory changes', undefined],
  ['watch directory changes with network mounts allowed', { allowNetworkMounts: true }],
] as const) {
  sandboxTest(name, async ({ sandbox }) => {
    const dir = opts ? 'test_watch_dir_network_mounts' : 'test_watch_dir'
    await sandbox.files.makeDir(dir)
    await sandbox.files.write(`${dir}/test_watch.txt`, CONTENT)
    const [seen, fire] = signal()
    const h = await sandbox.files.watchDir(
      dir,
      async (e) => {
        if (e.type === FilesystemEventType.WRITE && e.name === 'test_watch.txt') fire()
      },
      opts
    )
    await sandbox.files.write(`${dir}/test_watch.txt`, CHANGED)
    await seen
    await h.stop()
  })
}

sandboxTest('watch recursive directory changes', async ({ sandbox }) => {
  const dir = 'test_recursive_watch_dir'
  await sandbox.files.makeDir(`${dir}/test_nested_watch_dir`)
  await sandbox.files.write(`${dir}/test_nested_watch_dir/test_watch.txt`, CONTENT)
  const [seen, fire] = signal()
  const h = await sandbox.files.watchDir(
    dir,
    async (e) => {
      if (e.type === FilesystemEventType.WRITE && e.name === 'test_nested_watch_dir/test_watch.txt') fire()
    },
    { recursive: true }
  )
  await sandbox.files.write(`${dir}/test_nested_watch_dir/test_watch.txt`, CHANGED)
  await seen
  await h.stop()
})

sandboxTest('watch recursive directory after nested folder addition', async ({ sandbox }) => {
  const dir = 'test_recursive_watch_dir_add'
  await sandbox.files.makeDir(dir)
  const [fileSeen, fileFire] = signal()
  const [dirSeen, dirFire] = signal()
  const h = await sandbox.files.watchDir(
    dir,
    async (e) => {
      if (e.type === FilesystemEventType.WRITE && e.name === 'test_nested_watch_dir/test_watch.txt') fileFire()
      else if (e.type === FilesystemEventType.CREATE && e.name === 'test_nested_watch_dir') dirFire()
    },
    { recursive: true }
  )
  await sandbox.files.makeDir(`${dir}/test_nested_watch_dir`)
  await dirSeen
  await sandbox.files.write(`${dir}/test_nested_watch_dir/test_watch.txt`, CONTENT)
  await fileSeen
  await h.stop()
})

sandboxTest('watch directory changes with entry info', async ({ sandbox }) => {
  const dir = 'test_watch_dir_entry'
  await sandbox.files.makeDir(dir)
  await sandbox.files.write(`${dir}/test_watch.txt`, CONTENT)
  const [seen, fire] = signal<FilesystemEvent>()
  const h = await sandbox.files.watchDir(
    dir,
    async (e) => {
      if (e.type === FilesystemEventType.WRITE && e.name === 'test_watch.txt') fire(e)
    },
    { includeEntry: true }
  )
  await sandbox.files.write(`${dir}/test_watch.txt`, CHANGED)
  const e = await seen
  expect(e.entry).toBeDefined()
  expect(e.entry?.name).toBe('test_watch.txt')
  expect(e.entry?.path).toBe(`/home/user/${dir}/test_watch.txt`)
  expect(e.entry?.type).toBe(FileType.FILE)
  await h.stop()
})

sandboxTest('watch non-existing directory', async ({ sandbox }) => {
  await expect(sandbox.files.watchDir('non_existing_watch_dir', () => {})).rejects.toThrowError(FileNotFoundError)
})

sandboxTest('watch file', async ({ sandbox }) => {
  await sandbox.files.write('test_watch.txt', CONTENT)
  await expect(sandbox.files.watchDir('test_watch.txt', () => {})).rejects.toThrowError(SandboxError)
})
