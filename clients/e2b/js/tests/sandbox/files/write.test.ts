import path from 'node:path'
import { assert } from 'vitest'
import type { WriteEntry } from 'e2b'
import { sandboxTest } from '../../setup'

/** Upstream's checks of a refused call: if it resolves, to nothing. */
async function refusedWith(p: Promise<unknown>, message: string) {
  await p
    .then((r) => assert.isUndefined(r))
    .catch((err) => {
      assert.instanceOf(err, Error)
      assert.include(err.message, message)
    })
}

async function assertWritten(sandbox: any, at: string, data: string) {
  assert.isTrue(await sandbox.files.exists(at))
  assert.equal(await sandbox.files.read(at), data)
}

sandboxTest('write file', async ({ sandbox }) => {
  const content = 'This is a test file.'
  // @ts-expect-error: upstream calls it without a path on purpose
  await refusedWith(sandbox.files.write(undefined, content), 'Path or files are required')
  const info = await sandbox.files.write('test_write.txt', content)
  assert.isFalse(Array.isArray(info))
  assert.equal(info.name, 'test_write.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.path, '/home/user/test_write.txt')
  await assertWritten(sandbox, 'test_write.txt', content)
})

sandboxTest('write multiple files', async ({ sandbox }) => {
  const empty = await sandbox.files.write([])
  assert.isTrue(Array.isArray(empty))
  assert.equal(empty.length, 0)
  const one = [{ path: 'one_test_file.txt', data: 'This is a test file.' }]
  // @ts-expect-error: upstream calls it without a path on purpose
  await refusedWith(sandbox.files.write(undefined, one), 'Path or files are required')
  await refusedWith(
    // @ts-expect-error: a path and an array at once, on purpose
    sandbox.files.write('/path/to/file', one),
    'Cannot specify both path and array of files. You have to specify either path and data for a single file or an array for multiple files.'
  )
  const info = await sandbox.files.write(one)
  assert.isTrue(Array.isArray(info))
  assert.equal(info[0].name, 'one_test_file.txt')
  assert.equal(info[0].type, 'file')
  assert.equal(info[0].path, '/home/user/one_test_file.txt')

  const files: WriteEntry[] = []
  for (let i = 0; i < 10; i++) {
    files.push({
      path: i % 2 == 0 ? `/${i}/multi_test_file${i}.txt` : `/home/user/multi_test_file${i}.txt`,
      data: `This is a test file ${i}.`,
    })
  }
  const infos = await sandbox.files.write(files)
  assert.isTrue(Array.isArray(infos))
  assert.equal(infos.length, files.length)
  for (let i = 0; i < files.length; i++) {
    assert.equal(infos[i].name, path.basename(files[i].path))
    assert.equal(infos[i].path, files[i].path)
    assert.equal(infos[i].type, 'file')
    await assertWritten(sandbox, files[i].path, files[i].data as string)
  }
})

sandboxTest('overwrite file', async ({ sandbox }) => {
  await sandbox.files.write('test_overwrite.txt', 'Initial content.')
  await sandbox.files.write('test_overwrite.txt', 'New content.')
  assert.equal(await sandbox.files.read('test_overwrite.txt'), 'New content.')
})

sandboxTest('write to non-existing directory', async ({ sandbox }) => {
  await sandbox.files.write('non_existing_dir/test_write.txt', 'This should succeed too.')
  await assertWritten(sandbox, 'non_existing_dir/test_write.txt', 'This should succeed too.')
})

sandboxTest('writeFiles with empty array', async ({ sandbox }) => {
  const empty = await sandbox.files.writeFiles([])
  assert.isTrue(Array.isArray(empty))
  assert.equal(empty.length, 0)
})

sandboxTest('writeFiles with multiple files', async ({ sandbox }) => {
  const files: WriteEntry[] = Array.from({ length: 10 }, (_, i) => ({
    path: `writefiles_test_${i}.txt`,
    data: `This is a test file ${i}.`,
  }))
  const infos = await sandbox.files.writeFiles(files)
  assert.isTrue(Array.isArray(infos))
  assert.equal(infos.length, files.length)
  for (let i = 0; i < files.length; i++) {
    assert.equal(infos[i].name, path.basename(files[i].path))
    assert.equal(infos[i].path, `/home/user/${files[i].path}`)
    assert.equal(infos[i].type, 'file')
    await assertWritten(sandbox, infos[i].path, files[i].data as string)
  }
})

sandboxTest('writeFiles with different data types', async ({ sandbox }) => {
  const enc = new TextEncoder()
  const stream = new ReadableStream({
    start(c) {
      c.enqueue(enc.encode('ReadableStream data'))
      c.close()
    },
  })
  const infos = await sandbox.files.writeFiles([
    { path: 'writefiles_text.txt', data: 'Text string data' },
    { path: 'writefiles_arraybuffer.txt', data: enc.encode('ArrayBuffer data').buffer },
    { path: 'writefiles_blob.txt', data: new Blob(['Blob data'], { type: 'text/plain' }) },
    { path: 'writefiles_stream.txt', data: stream },
  ])
  assert.equal(infos.length, 4)
  assert.equal(await sandbox.files.read('writefiles_text.txt'), 'Text string data')
  assert.equal(await sandbox.files.read('writefiles_arraybuffer.txt'), 'ArrayBuffer data')
  assert.equal(await sandbox.files.read('writefiles_blob.txt'), 'Blob data')
  assert.equal(await sandbox.files.read('writefiles_stream.txt'), 'ReadableStream data')
})

sandboxTest('writeFiles creates parent directories', async ({ sandbox }) => {
  const infos = await sandbox.files.writeFiles([
    { path: 'writefiles_nested_dir/nested/file1.txt', data: 'Content in nested directory' },
  ])
  assert.equal(infos.length, 1)
  assert.equal(infos[0].path, '/home/user/writefiles_nested_dir/nested/file1.txt')
  await assertWritten(sandbox, infos[0].path, 'Content in nested directory')
})

sandboxTest('writeFiles overwrites existing files', async ({ sandbox }) => {
  await sandbox.files.writeFiles([{ path: 'writefiles_overwrite.txt', data: 'Initial content' }])
  assert.equal(await sandbox.files.read('writefiles_overwrite.txt'), 'Initial content')
  await sandbox.files.writeFiles([{ path: 'writefiles_overwrite.txt', data: 'New content' }])
  assert.equal(await sandbox.files.read('writefiles_overwrite.txt'), 'New content')
})

for (const gzip of [false, true]) {
  sandboxTest(`write ReadableStream with octet stream upload${gzip ? ' and gzip' : ''}`, async ({ sandbox }) => {
    const name = gzip ? 'test_write_octet_stream_gzip.bin' : 'test_write_octet_stream.bin'
    const content = (gzip ? 'Streamed gzipped octet-stream upload. ' : 'Streamed octet-stream upload. ').repeat(10_000)
    const info = await sandbox.files.write(name, new Blob([content]).stream(), {
      useOctetStream: true,
      ...(gzip ? { gzip: true } : {}),
    })
    assert.equal(info.path, `/home/user/${name}`)
    assert.equal(await sandbox.files.read(name), content)
  })
}
