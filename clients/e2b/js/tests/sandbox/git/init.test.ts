import { expect } from 'vitest'
import { sandboxTest } from '../../setup'
import { stdoutOf, withBaseDir } from './helpers'

sandboxTest('git init', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = `${base}/repo`
    await sandbox.git.init(repo, { initialBranch: 'main' })
    expect(await sandbox.files.exists(`${repo}/.git`)).toBe(true)
    expect(await stdoutOf(sandbox, `git -C "${repo}" symbolic-ref --short HEAD`)).toBe('main')
  })
})
