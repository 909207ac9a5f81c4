// Upstream: files/exists, files/makeDir, files/remove, files/rename,
// files/read, files/info (one file here; each upstream test keeps its name).
import { assert, expect } from 'vitest'
import { FileNotFoundError, NotFoundError } from 'e2b'
import { sandboxTest } from '../../setup'

sandboxTest('file exists', async ({ sandbox }) => {
  await sandbox.files.write('test_exists.txt', 'test')
  assert.isTrue(await sandbox.files.exists('test_exists.txt'))
})

sandboxTest('file does not exist', async ({ sandbox }) => {
  assert.isFalse(await sandbox.files.exists('test_does_not_exist.txt'))
})

sandboxTest('make directory', async ({ sandbox }) => {
  await sandbox.files.makeDir('test_directory1')
  assert.isTrue(await sandbox.files.exists('test_directory1'))
})

sandboxTest('make existing directory', async ({ sandbox }) => {
  await sandbox.files.makeDir('test_directory2')
  assert.isTrue(await sandbox.files.exists('test_directory2'))
  assert.isFalse(await sandbox.files.makeDir('test_directory2'))
})

sandboxTest('make nested directory', async ({ sandbox }) => {
  await sandbox.files.makeDir('test_directory3/nested_directory')
  assert.isTrue(await sandbox.files.exists('test_directory3/nested_directory'))
})

sandboxTest('remove file', async ({ sandbox }) => {
  await sandbox.files.write('test_remove.txt', 'This file will be removed.')
  await sandbox.files.remove('test_remove.txt')
  assert.isFalse(await sandbox.files.exists('test_remove.txt'))
})

sandboxTest('remove non-existing file', async ({ sandbox }) => {
  await sandbox.files.remove('non_existing_file.txt')
})

sandboxTest('rename file', async ({ sandbox }) => {
  const content = 'This file will be renamed.'
  await sandbox.files.write('test_rename_old.txt', content)
  const info = await sandbox.files.rename('test_rename_old.txt', 'test_rename_new.txt')
  assert.equal(info.name, 'test_rename_new.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.path, '/home/user/test_rename_new.txt')
  assert.isFalse(await sandbox.files.exists('test_rename_old.txt'))
  assert.isTrue(await sandbox.files.exists('test_rename_new.txt'))
  assert.equal(await sandbox.files.read('test_rename_new.txt'), content)
})

sandboxTest('rename non-existing file', async ({ sandbox }) => {
  await expect(
    sandbox.files.rename('non_existing_file.txt', 'new_non_existing_file.txt')
  ).rejects.toThrowError(FileNotFoundError)
})

sandboxTest('read file', async ({ sandbox }) => {
  await sandbox.files.write('test_read.txt', 'Hello, world!')
  assert.equal(await sandbox.files.read('test_read.txt'), 'Hello, world!')
})

sandboxTest('read non-existing file', async ({ sandbox }) => {
  await expect(sandbox.files.read('non_existing_file.txt')).rejects.toThrowError(FileNotFoundError)
})

sandboxTest('read non-existing file catches with deprecated NotFoundError', async ({ sandbox }) => {
  await expect(sandbox.files.read('non_existing_file.txt')).rejects.toThrowError(NotFoundError)
})

async function drain(stream: unknown): Promise<Buffer> {
  const chunks: Uint8Array[] = []
  for await (const c of stream as AsyncIterable<Uint8Array>) chunks.push(c)
  return Buffer.concat(chunks)
}

sandboxTest('read file as stream', async ({ sandbox }) => {
  const content = 'Streamed read content. '.repeat(10_000)
  await sandbox.files.write('test_read_stream.txt', content)
  const stream = await sandbox.files.read('test_read_stream.txt', { format: 'stream' })
  assert.equal((await drain(stream)).toString('utf-8'), content)
})

sandboxTest('read non-existing file as stream', async ({ sandbox }) => {
  await expect(
    sandbox.files.read('non_existing_file.txt', { format: 'stream' })
  ).rejects.toThrowError(FileNotFoundError)
})

sandboxTest('read empty file in all formats', async ({ sandbox }) => {
  const name = 'empty-file-formats.txt'
  await sandbox.commands.run(`touch ${name}`)
  expect(await sandbox.files.read(name, { format: 'text' })).toBe('')
  const bytes = await sandbox.files.read(name, { format: 'bytes' })
  expect(bytes).toBeInstanceOf(Uint8Array)
  expect(bytes.length).toBe(0)
  const blob = await sandbox.files.read(name, { format: 'blob' })
  expect(blob).toBeInstanceOf(Blob)
  expect(blob.size).toBe(0)
  const stream = await sandbox.files.read(name, { format: 'stream' })
  expect(stream).toBeInstanceOf(ReadableStream)
  expect((await drain(stream)).length).toBe(0)
})

sandboxTest('get info of a file', async ({ sandbox }) => {
  await sandbox.files.write('test_file.txt', 'test')
  const info = await sandbox.files.getInfo('test_file.txt')
  const cwd = (await sandbox.commands.run('pwd')).stdout.trim()
  assert.equal(info.name, 'test_file.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.path, `${cwd}/test_file.txt`)
  assert.equal(info.size, 4)
  assert.equal(info.mode, 0o644)
  assert.equal(info.permissions, '-rw-r--r--')
  assert.equal(info.owner, 'user')
  assert.equal(info.group, 'user')
  assert.property(info, 'modifiedTime')
})

sandboxTest('get info of a file that does not exist', async ({ sandbox }) => {
  await expect(sandbox.files.getInfo('test_does_not_exist.txt')).rejects.toThrow(FileNotFoundError)
})

sandboxTest('get info of a directory', async ({ sandbox }) => {
  await sandbox.files.makeDir('test_dir')
  const info = await sandbox.files.getInfo('test_dir')
  const cwd = (await sandbox.commands.run('pwd')).stdout.trim()
  assert.equal(info.name, 'test_dir')
  assert.equal(info.type, 'dir')
  assert.equal(info.path, `${cwd}/test_dir`)
  assert.isAbove(info.size, 0)
  assert.equal(info.mode, 0o755)
  assert.equal(info.permissions, 'drwxr-xr-x')
  assert.equal(info.owner, 'user')
  assert.equal(info.group, 'user')
  assert.property(info, 'modifiedTime')
})

sandboxTest('get info of a directory that does not exist', async ({ sandbox }) => {
  await expect(sandbox.files.getInfo('test_does_not_exist_dir')).rejects.toThrow(FileNotFoundError)
})

sandboxTest('get info of a symlink', async ({ sandbox }) => {
  await sandbox.files.write('test_file.txt', 'test')
  await sandbox.commands.run('ln -s test_file.txt test_symlink.txt')
  const info = await sandbox.files.getInfo('test_symlink.txt')
  const cwd = (await sandbox.commands.run('pwd')).stdout.trim()
  assert.equal(info.name, 'test_symlink.txt')
  assert.equal(info.symlinkTarget, `${cwd}/test_file.txt`)
})
