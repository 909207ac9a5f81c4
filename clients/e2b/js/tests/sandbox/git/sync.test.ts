import { expect } from 'vitest'
import type { Sandbox } from 'e2b'
import { sandboxTest } from '../../setup'
import { AUTHOR, createRepoWithCommit, stdoutOf, withBaseDir, withGitDaemon, type GitDaemon } from './helpers'

/**
 * Every sync test: a repo with one commit, the sandbox's git daemon, and
 * the daemon's repository added to the repo as origin.
 */
async function withOrigin(
  sandbox: Sandbox,
  body: (repo: string, daemon: GitDaemon, base: string) => Promise<void>
) {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepoWithCommit(sandbox, base)
    await withGitDaemon(sandbox, base, async (daemon) => {
      await sandbox.git.remoteAdd(repo, 'origin', daemon.remoteUrl)
      await body(repo, daemon, base)
    })
  })
}

sandboxTest('git push updates remote', async ({ sandbox }) => {
  await withOrigin(sandbox, async (repo, { remotePath }) => {
    await sandbox.git.push(repo, { remote: 'origin', branch: 'main' })
    expect(await stdoutOf(sandbox, `git --git-dir="${remotePath}" log -1 --pretty=%B`)).toBe('Initial commit')
  })
})

sandboxTest('git push warns when no upstream', async ({ sandbox }) => {
  await withOrigin(sandbox, async (repo) => {
    await expect(sandbox.git.push(repo, { setUpstream: false })).rejects.toThrow(
      /no upstream branch is configured/i
    )
  })
})

sandboxTest('git pull updates clone', async ({ sandbox }) => {
  await withOrigin(sandbox, async (repo, { remoteUrl }, base) => {
    await sandbox.git.push(repo, { remote: 'origin', branch: 'main' })
    const clone = `${base}/clone`
    await sandbox.git.clone(remoteUrl, { path: clone })

    await sandbox.files.write(`${repo}/README.md`, 'hello\nmore\n')
    await sandbox.git.add(repo)
    await sandbox.git.commit(repo, 'Update README', AUTHOR)
    // The first push set main's upstream, so a bare push and pull suffice.
    await sandbox.git.push(repo)
    await sandbox.git.pull(clone)
    expect(await sandbox.files.read(`${clone}/README.md`)).toContain('more')
  })
})

sandboxTest('git pull warns when no upstream', async ({ sandbox }) => {
  await withOrigin(sandbox, async (repo) => {
    await expect(sandbox.git.pull(repo)).rejects.toThrow(/no upstream branch is configured/i)
  })
})
