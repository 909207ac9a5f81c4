import { expect } from 'vitest'
import { sandboxTest } from '../../setup'
import { AUTHOR, createRepo, entryOf, withBaseDir } from './helpers'

sandboxTest('git status reports untracked file', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    await sandbox.files.write(`${repo}/README.md`, 'hello\n')

    const status = await sandbox.git.status(repo)
    expect(entryOf(status, 'README.md')?.status).toBe('untracked')
    expect(status).toMatchObject({
      isClean: false,
      hasChanges: true,
      hasUntracked: true,
      hasStaged: false,
      hasConflicts: false,
      totalCount: 1,
      stagedCount: 0,
      unstagedCount: 1,
      untrackedCount: 1,
      conflictCount: 0,
    })
  })
})

sandboxTest('git status reports added modified deleted renamed', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    for (const [name, text] of [
      ['README.md', 'hello\n'],
      ['DELETE.md', 'delete me\n'],
      ['RENAME.md', 'rename me\n'],
    ]) {
      await sandbox.files.write(`${repo}/${name}`, text)
    }
    await sandbox.git.add(repo)
    await sandbox.git.commit(repo, 'Initial commit', AUTHOR)

    // One change of each kind: modified (unstaged), added, deleted, renamed (staged).
    await sandbox.files.write(`${repo}/README.md`, 'hello again\n')
    await sandbox.files.write(`${repo}/NEW.md`, 'new file\n')
    await sandbox.git.add(repo, { files: ['NEW.md'] })
    await sandbox.commands.run(`git -C "${repo}" rm DELETE.md`)
    await sandbox.commands.run(`git -C "${repo}" mv RENAME.md RENAMED.md`)

    const status = await sandbox.git.status(repo)
    expect(entryOf(status, 'README.md')).toMatchObject({ status: 'modified', staged: false })
    expect(entryOf(status, 'NEW.md')).toMatchObject({ status: 'added', staged: true })
    expect(entryOf(status, 'DELETE.md')).toMatchObject({ status: 'deleted', staged: true })
    expect(entryOf(status, 'RENAMED.md')).toMatchObject({
      status: 'renamed',
      staged: true,
      renamedFrom: 'RENAME.md',
    })
    expect(status).toMatchObject({
      hasChanges: true,
      hasStaged: true,
      hasUntracked: false,
      hasConflicts: false,
      totalCount: 4,
      stagedCount: 3,
      unstagedCount: 1,
      untrackedCount: 0,
      conflictCount: 0,
    })
  })
})
