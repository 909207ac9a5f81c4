import { expect } from 'vitest'
import { sandboxTest } from '../../setup'
import { createRepoWithCommit, withBaseDir } from './helpers'

sandboxTest('git reset --hard discards changes', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepoWithCommit(sandbox, base)
    await sandbox.files.write(`${repo}/README.md`, 'changed\n')
    expect((await sandbox.git.status(repo)).isClean).toBe(false)

    await sandbox.git.reset(repo, { mode: 'hard', target: 'HEAD' })
    expect((await sandbox.git.status(repo)).isClean).toBe(true)
    expect(await sandbox.files.read(`${repo}/README.md`)).toBe('hello\n')
  })
})
