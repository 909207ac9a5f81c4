// The SDK's own argument checks on `Git`, run against a command runner
// that fails if reached: no sandbox is involved. Upstream imports Git,
// Commands and InvalidArgumentError from the SDK's sources; the released
// package exports all three, so they come from 'e2b' here.
import { expect, test } from 'vitest'
import { Git, InvalidArgumentError, type Commands } from 'e2b'

const REACHED = 'commands.run should not be called'

/** A Git whose every command would fail with REACHED. */
function unrunnableGit(): Git {
  const commands = {
    run: () => {
      throw new Error(REACHED)
    },
  } as unknown as Commands
  return new Git(commands)
}

test('git.reset throws InvalidArgumentError on an invalid mode', async () => {
  // @ts-expect-error: a mode the type does not allow, to reach the runtime check
  await expect(unrunnableGit().reset('/repo', { mode: 'bogus' })).rejects.toThrow(InvalidArgumentError)
})

test('git.reset accepts a valid mode', async () => {
  // Passing validation means reaching the runner.
  await expect(unrunnableGit().reset('/repo', { mode: 'hard' })).rejects.toThrow(REACHED)
})

test('git.remoteAdd throws InvalidArgumentError when name or url is missing', async () => {
  const git = unrunnableGit()
  await expect(git.remoteAdd('/repo', '', 'https://example.com')).rejects.toThrow(InvalidArgumentError)
  await expect(git.remoteAdd('/repo', 'origin', '')).rejects.toThrow(InvalidArgumentError)
})

test('git.remoteGet throws InvalidArgumentError when name is missing', async () => {
  await expect(unrunnableGit().remoteGet('/repo', '')).rejects.toThrow(InvalidArgumentError)
})
