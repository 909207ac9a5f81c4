import { assert, expect, test } from 'vitest'
import { InvalidArgumentError, Sandbox, SandboxNotFoundError } from 'e2b'
import { isDebug, sandboxTest } from '../setup'

/** A key of the shape the SDK accepts, for calls refused before any request. */
const TEST_API_KEY = `e2b_${'0'.repeat(40)}`

sandboxTest.skipIf(isDebug)('fork a sandbox', async ({ sandbox }) => {
  await sandbox.files.write('/home/user/state.txt', 'state before fork')
  const forks = await sandbox.fork()
  assert.equal(forks.length, 1)
  const fork = forks[0]
  assert.instanceOf(fork, Sandbox)
  if (!(fork instanceof Sandbox)) return
  try {
    assert.notEqual(fork.sandboxId, sandbox.sandboxId)
    assert.isTrue(await sandbox.isRunning())
    assert.isTrue(await fork.isRunning())
    assert.equal(await fork.files.read('/home/user/state.txt'), 'state before fork')
    await fork.files.write('/home/user/state.txt', 'modified in fork')
    assert.equal(await sandbox.files.read('/home/user/state.txt'), 'state before fork')
  } finally {
    await fork.kill()
  }
})

sandboxTest.skipIf(isDebug)('fork a sandbox multiple times', async ({ sandbox }) => {
  const forks = await sandbox.fork({ count: 2, timeoutMs: 60_000 })
  assert.equal(forks.length, 2)
  const made = forks.filter((f): f is Sandbox => f instanceof Sandbox)
  try {
    assert.equal(made.length, 2)
    const ids = new Set(made.map((s) => s.sandboxId))
    assert.equal(ids.size, 2)
    assert.isFalse(ids.has(sandbox.sandboxId))
    for (const f of made) assert.isTrue(await f.isRunning())
  } finally {
    await Promise.all(made.map((s) => s.kill()))
  }
})

sandboxTest.skipIf(isDebug)('fork a sandbox by ID with the static method', async ({ sandbox }) => {
  const forks = await Sandbox.fork(sandbox.sandboxId)
  assert.equal(forks.length, 1)
  const fork = forks[0]
  assert.instanceOf(fork, Sandbox)
  if (fork instanceof Sandbox) {
    try {
      assert.isTrue(await fork.isRunning())
    } finally {
      await fork.kill()
    }
  }
})

test.skipIf(isDebug)('fork a killed sandbox fails', async () => {
  const sbx = await Sandbox.create()
  await sbx.kill()
  await expect(sbx.fork()).rejects.toThrowError(SandboxNotFoundError)
})

// Upstream's check is the SDK's own, made before any request in later SDK
// releases; the pinned SDK sends count 0, and stasis's 400 ("count must be at
// least 1", tested in crates/e2b) comes back as the SDK's generic
// SandboxError. Not applicable at this SDK version (see the README).
test.skip('fork with count lower than 1 fails', async () => {
  await expect(Sandbox.fork('sbx-test', { count: 0, apiKey: TEST_API_KEY })).rejects.toThrowError(
    InvalidArgumentError
  )
})
