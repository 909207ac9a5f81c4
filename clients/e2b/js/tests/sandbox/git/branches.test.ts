import { expect } from 'vitest'
import type { Sandbox } from 'e2b'
import { sandboxTest } from '../../setup'
import { createRepoWithCommit, stdoutOf, withBaseDir } from './helpers'

/** A repo with one commit on main and a branch `feature` made by git itself. */
async function repoWithFeature(sandbox: Sandbox, base: string): Promise<string> {
  const repo = await createRepoWithCommit(sandbox, base)
  await sandbox.commands.run(`git -C "${repo}" branch feature`)
  return repo
}

sandboxTest('git branches lists current and feature', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const { currentBranch, branches } = await sandbox.git.branches(await repoWithFeature(sandbox, base))
    expect(currentBranch).toBe('main')
    expect(branches).toContain('main')
    expect(branches).toContain('feature')
  })
})

sandboxTest('git checkoutBranch switches branch', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await repoWithFeature(sandbox, base)
    await sandbox.git.checkoutBranch(repo, 'feature')
    expect(await stdoutOf(sandbox, `git -C "${repo}" rev-parse --abbrev-ref HEAD`)).toBe('feature')
  })
})

sandboxTest('git createBranch creates and checks out branch', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepoWithCommit(sandbox, base)
    await sandbox.git.createBranch(repo, 'feature')
    const { currentBranch, branches } = await sandbox.git.branches(repo)
    expect(branches).toContain('feature')
    expect(currentBranch).toBe('feature')
  })
})

sandboxTest('git deleteBranch removes branch', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await repoWithFeature(sandbox, base)
    await sandbox.git.deleteBranch(repo, 'feature')
    expect(await stdoutOf(sandbox, `git -C "${repo}" branch --list feature`)).toBe('')
    expect((await sandbox.git.branches(repo)).branches).not.toContain('feature')
  })
})
