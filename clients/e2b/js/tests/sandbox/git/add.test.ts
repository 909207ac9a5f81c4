import { expect } from 'vitest'
import { sandboxTest } from '../../setup'
import { createRepo, entryOf, withBaseDir } from './helpers'

sandboxTest('git add stages files', async ({ sandbox }) => {
  await withBaseDir(sandbox, async (base) => {
    const repo = await createRepo(sandbox, base)
    await sandbox.files.write(`${repo}/README.md`, 'hello\n')
    await sandbox.git.add(repo)
    const readme = entryOf(await sandbox.git.status(repo), 'README.md')
    expect(readme?.status).toBe('added')
    expect(readme?.staged).toBe(true)
  })
})
