// Upstream: files/contentEncoding and files/metadata.
import { assert, expect } from 'vitest'
import { InvalidArgumentError, type WriteEntry } from 'e2b'
import { sandboxTest } from '../../setup'

sandboxTest('write and read file with gzip content encoding', async ({ sandbox }) => {
  const content = 'This is a test file with gzip encoding.'
  const info = await sandbox.files.write('test_gzip_write.txt', content, { gzip: true })
  assert.equal(info.name, 'test_gzip_write.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.path, '/home/user/test_gzip_write.txt')
  assert.equal(await sandbox.files.read('test_gzip_write.txt', { gzip: true }), content)
})

sandboxTest('write with gzip and read without encoding', async ({ sandbox }) => {
  await sandbox.files.write('test_gzip_write_plain_read.txt', 'Written with gzip, read without.', { gzip: true })
  assert.equal(await sandbox.files.read('test_gzip_write_plain_read.txt'), 'Written with gzip, read without.')
})

sandboxTest('writeFiles with gzip content encoding', async ({ sandbox }) => {
  const files: WriteEntry[] = [1, 2, 3].map((i) => ({ path: `gzip_multi_${i}.txt`, data: `File ${i} content` }))
  const infos = await sandbox.files.writeFiles(files, { gzip: true })
  assert.equal(infos.length, files.length)
  for (const f of files) assert.equal(await sandbox.files.read(f.path), f.data)
})

sandboxTest('read file as bytes with gzip content encoding', async ({ sandbox }) => {
  await sandbox.files.write('test_gzip_bytes.txt', 'Binary content with gzip.')
  const bytes = await sandbox.files.read('test_gzip_bytes.txt', { format: 'bytes', gzip: true })
  assert.instanceOf(bytes, Uint8Array)
  assert.equal(new TextDecoder().decode(bytes), 'Binary content with gzip.')
})

const META = { author: 'mish', purpose: 'upload' }

for (const octet of [false, true]) {
  sandboxTest(`write file with metadata${octet ? ' using octet-stream' : ''}`, async ({ sandbox }) => {
    const name = octet ? 'test_metadata_octet.txt' : 'test_metadata.txt'
    const info = await sandbox.files.write(name, 'This is a test file with metadata.', {
      metadata: META,
      ...(octet ? { useOctetStream: true } : {}),
    })
    assert.isFalse(Array.isArray(info))
    assert.deepEqual(info.metadata, META)
    assert.deepEqual((await sandbox.files.getInfo(name)).metadata, META)
  })
}

sandboxTest('write file without metadata', async ({ sandbox }) => {
  const info = await sandbox.files.write('test_no_metadata.txt', 'no metadata here')
  assert.isUndefined(info.metadata)
  assert.isUndefined((await sandbox.files.getInfo('test_no_metadata.txt')).metadata)
})

sandboxTest('writeFiles applies metadata to every file', async ({ sandbox }) => {
  const metadata = { source: 'test-suite' }
  const infos = await sandbox.files.writeFiles(
    [
      { path: 'metadata_multi_1.txt', data: 'File 1' },
      { path: 'metadata_multi_2.txt', data: 'File 2' },
    ],
    { metadata }
  )
  assert.equal(infos.length, 2)
  for (const info of infos) {
    assert.deepEqual(info.metadata, metadata)
    assert.deepEqual((await sandbox.files.getInfo(info.path)).metadata, metadata)
  }
})

sandboxTest('metadata is surfaced when listing', async ({ sandbox }) => {
  await sandbox.files.makeDir('metadata_list_dir')
  await sandbox.files.write('metadata_list_dir/listed.txt', 'content', { metadata: { tag: 'listed' } })
  const entry = (await sandbox.files.list('metadata_list_dir')).find((e) => e.name === 'listed.txt')
  assert.isDefined(entry)
  assert.deepEqual(entry?.metadata, { tag: 'listed' })
})

sandboxTest('metadata is surfaced after rename', async ({ sandbox }) => {
  await sandbox.files.write('metadata_rename_old.txt', 'content', { metadata: { stage: 'renamed' } })
  const info = await sandbox.files.rename('metadata_rename_old.txt', 'metadata_rename_new.txt')
  assert.deepEqual(info.metadata, { stage: 'renamed' })
})

sandboxTest('overwriting a file clears stale metadata', async ({ sandbox }) => {
  await sandbox.files.write('metadata_overwrite.txt', 'first', { metadata: { author: 'mish' } })
  const info = await sandbox.files.write('metadata_overwrite.txt', 'second')
  assert.isUndefined(info.metadata)
  assert.isUndefined((await sandbox.files.getInfo('metadata_overwrite.txt')).metadata)
})

sandboxTest('metadata set via xattrs is surfaced in getInfo', async ({ sandbox }) => {
  await sandbox.files.write('metadata_xattr.txt', 'content')
  const path = (await sandbox.commands.run('realpath metadata_xattr.txt')).stdout.trim()
  // Set out of band, in the namespace uploads use; read back without it.
  await sandbox.commands.run(`python3 -c "import os; os.setxattr('${path}', 'user.e2b.author', b'mish')"`)
  assert.deepEqual((await sandbox.files.getInfo('metadata_xattr.txt')).metadata, { author: 'mish' })
})

sandboxTest('rejects invalid metadata', async ({ sandbox }) => {
  const name = 'invalid_metadata.txt'
  for (const metadata of [
    { 'bad key': 'value' },
    { '': 'value' },
    { good: 'bad\nvalue' },
    { good: 'value\n' },
    { 'key\n': 'value' },
  ]) {
    await expect(sandbox.files.write(name, 'x', { metadata })).rejects.toThrow(InvalidArgumentError)
  }
  assert.isFalse(await sandbox.files.exists(name))
})
