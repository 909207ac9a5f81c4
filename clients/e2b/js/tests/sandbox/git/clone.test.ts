import { expect } from 'vitest'
import { sandboxTest } from '../../setup'
import { createRepoWithCommit, withBaseDir, withGitDaemon } from './helpers'

sandboxTest('git clone fetches repo', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepoWithCommit(sandbox, base)
    await withGitDaemon(sandbox, base, async ({ remoteUrl }) => {
      await sandbox.git.remoteAdd(repo, 'origin', remoteUrl)
      await sandbox.git.push(repo, { remote: 'origin', branch: 'main' })
      const clone = `${base}/clone`
      await sandbox.git.clone(remoteUrl, { path: clone })
      expect(await sandbox.files.read(`${clone}/README.md`)).toContain('hello')
    })
  })
})
