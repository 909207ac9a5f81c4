import { assert } from 'vitest'
import type { CommandHandle, Sandbox } from 'e2b'
import { sandboxTest } from '../../setup'

const HELLO = 'Hello, World!'

/** `cat` in the background with stdin open, as every upstream case starts. */
function cat(sandbox: Sandbox): Promise<CommandHandle> {
  return sandbox.commands.run('cat', { background: true, stdin: true })
}

/** Upstream's wait: up to five half-second polls for the echo. */
async function echoed(h: CommandHandle, text: string): Promise<void> {
  for (let i = 0; i < 5 && h.stdout !== text; i++) await new Promise((r) => setTimeout(r, 500))
}

for (const [name, text] of [
  ['send stdin to process', HELLO],
  ['send special characters to stdin', '!@#$%^&*()_+'],
  ['send multiline string to stdin', 'Hello,\nWorld!'],
] as const) {
  sandboxTest(name, async ({ sandbox }) => {
    const h = await cat(sandbox)
    await sandbox.commands.sendStdin(h.pid, text)
    await echoed(h, text)
    await h.kill()
    assert.equal(h.stdout, text)
  })
}

sandboxTest('send Uint8Array stdin to process', async ({ sandbox }) => {
  const h = await cat(sandbox)
  await sandbox.commands.sendStdin(h.pid, new TextEncoder().encode(HELLO))
  await echoed(h, HELLO)
  await h.kill()
  assert.equal(h.stdout, HELLO)
})

sandboxTest('send stdin via command handle', async ({ sandbox }) => {
  const h = await cat(sandbox)
  await h.sendStdin(HELLO)
  await echoed(h, HELLO)
  await h.kill()
  assert.equal(h.stdout, HELLO)
})

sandboxTest('close stdin via command handle', async ({ sandbox }) => {
  const h = await cat(sandbox)
  await h.sendStdin(HELLO)
  await h.closeStdin()
  // cat ends at EOF.
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, HELLO)
})

sandboxTest('send empty stdin to process', async ({ sandbox }) => {
  const h = await cat(sandbox)
  await sandbox.commands.sendStdin(h.pid, '')
  await h.kill()
  assert.equal(h.stdout, '')
})
