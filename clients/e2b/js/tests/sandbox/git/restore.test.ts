import { expect } from 'vitest'
import { sandboxTest } from '../../setup'
import { createRepoWithCommit, withBaseDir } from './helpers'

sandboxTest('git restore --staged unstages changes', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepoWithCommit(sandbox, base)
    await sandbox.files.write(`${repo}/README.md`, 'changed\n')
    await sandbox.git.add(repo, { files: ['README.md'] })
    expect((await sandbox.git.status(repo)).hasStaged).toBe(true)

    await sandbox.git.restore(repo, { paths: ['README.md'], staged: true, worktree: false })
    const after = await sandbox.git.status(repo)
    expect(after.hasStaged).toBe(false)
    expect(after.hasChanges).toBe(true)
  })
})

sandboxTest('git restore discards working tree changes', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepoWithCommit(sandbox, base)
    await sandbox.files.write(`${repo}/README.md`, 'changed\n')
    expect((await sandbox.git.status(repo)).isClean).toBe(false)

    await sandbox.git.restore(repo, { paths: ['README.md'] })
    expect((await sandbox.git.status(repo)).isClean).toBe(true)
    expect(await sandbox.files.read(`${repo}/README.md`)).toBe('hello\n')
  })
})
