import { expect } from 'vitest'
import type { Sandbox } from 'e2b'
import { sandboxTest } from '../../setup'
import { AUTHOR, AUTHOR_EMAIL, createRepo, stdoutOf, withBaseDir } from './helpers'

/** The last commit's field in `git log` format `%<field>`. */
const lastCommit = (sandbox: Sandbox, repo: string, field: string) =>
  stdoutOf(sandbox, `git -C "${repo}" log -1 --pretty=%${field}`)

sandboxTest('git commit creates commit', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    await sandbox.files.write(`${repo}/README.md`, 'hello\n')
    await sandbox.git.add(repo)
    await sandbox.git.commit(repo, 'Initial commit', AUTHOR)
    expect(await lastCommit(sandbox, repo, 'B')).toBe('Initial commit')
  })
})

sandboxTest('git commit uses config for missing author fields', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    await sandbox.commands.run(`git -C "${repo}" config --local user.email "${AUTHOR_EMAIL}"`)
    await sandbox.files.write(`${repo}/README.md`, 'hello\n')
    await sandbox.git.add(repo)
    // Only the name is given: the email comes from the repository's config.
    await sandbox.git.commit(repo, 'Partial author commit', { authorName: 'Override Bot' })
    expect(await lastCommit(sandbox, repo, 'an')).toBe('Override Bot')
    expect(await lastCommit(sandbox, repo, 'ae')).toBe(AUTHOR_EMAIL)
  })
})
