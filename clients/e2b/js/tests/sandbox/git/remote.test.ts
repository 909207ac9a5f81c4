import { expect } from 'vitest'
import type { Sandbox } from 'e2b'
import { sandboxTest } from '../../setup'
import { createRepo, stdoutOf, withBaseDir, withGitDaemon } from './helpers'

/** Both views of origin's URL: git's own and the SDK's. */
async function expectOrigin(sandbox: Sandbox, repo: string, url: string) {
  expect(await stdoutOf(sandbox, `git -C "${repo}" remote get-url origin`)).toBe(url)
  expect(await sandbox.git.remoteGet(repo, 'origin')).toBe(url)
}

sandboxTest('git remoteGet returns undefined for missing remote', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    expect(await sandbox.git.remoteGet(repo, 'origin')).toBeUndefined()
  })
})

sandboxTest('git remoteAdd adds remote', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    await withGitDaemon(sandbox, base, async ({ remoteUrl }) => {
      await sandbox.git.remoteAdd(repo, 'origin', remoteUrl)
      expect(await sandbox.git.remoteGet(repo, 'origin')).toBe(remoteUrl)
    })
  })
})

sandboxTest('git remoteAdd overwrites existing remote', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    await withGitDaemon(sandbox, base, async ({ remoteUrl, port }) => {
      await sandbox.git.remoteAdd(repo, 'origin', remoteUrl)
      await expectOrigin(sandbox, repo, remoteUrl)

      await sandbox.commands.run(`git init --bare --initial-branch=main "${base}/remote-2.git"`)
      const secondUrl = `git://127.0.0.1:${port}/remote-2.git`
      await sandbox.git.remoteAdd(repo, 'origin', secondUrl, { overwrite: true })
      await expectOrigin(sandbox, repo, secondUrl)
    })
  })
})
