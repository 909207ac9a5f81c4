import { expect } from 'vitest'
import { sandboxTest } from '../../setup'
import { AUTHOR_EMAIL, AUTHOR_NAME, createRepo, stdoutOf, withBaseDir } from './helpers'

sandboxTest('git getConfig reads local config', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    await sandbox.commands.run(`git -C "${repo}" config --local pull.rebase true`)
    expect(await sandbox.git.getConfig('pull.rebase', { scope: 'local', path: repo })).toBe('true')
    expect(await stdoutOf(sandbox, `git -C "${repo}" config --local --get pull.rebase`)).toBe('true')
  })
})

sandboxTest('git setConfig updates local config', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    await sandbox.git.setConfig('pull.rebase', 'true', { scope: 'local', path: repo })
    expect(await stdoutOf(sandbox, `git -C "${repo}" config --local --get pull.rebase`)).toBe('true')
    expect(await sandbox.git.getConfig('pull.rebase', { scope: 'local', path: repo })).toBe('true')
  })
})

sandboxTest('git configureUser sets global user config', async ({ sandbox }) => {
  await sandbox.git.configureUser(AUTHOR_NAME, AUTHOR_EMAIL)
  for (const [key, value] of [
    ['user.name', AUTHOR_NAME],
    ['user.email', AUTHOR_EMAIL],
  ]) {
    expect(await stdoutOf(sandbox, `git config --global --get ${key}`)).toBe(value)
    expect(await sandbox.git.getConfig(key, { scope: 'global' })).toBe(value)
  }
})
