// Upstream: api/list (its second half repeats the first test for test;
// each distinct test is ported once, under its name).
import { randomUUID } from 'node:crypto'
import { assert } from 'vitest'
import { Sandbox, type SandboxInfo } from 'e2b'
import { isDebug, sandboxTest } from '../setup'

const only = sandboxTest.skipIf(isDebug)

only('list sandboxes', async ({ sandbox, sandboxTestId }) => {
  const got = await Sandbox.list({ query: { metadata: { sandboxTestId } } }).nextItems()
  assert.isAtLeast(got.length, 1)
  assert.isTrue(got.some((s) => s.sandboxId === sandbox.sandboxId))
})

only('list sandboxes with filter', async () => {
  const uniqueId = randomUUID()
  const extra = await Sandbox.create({ metadata: { uniqueId } })
  try {
    const got = await Sandbox.list({ query: { metadata: { uniqueId } } }).nextItems()
    assert.equal(got.length, 1)
    assert.equal(got[0].sandboxId, extra.sandboxId)
  } finally {
    await extra.kill()
  }
})

for (const state of ['running', 'paused'] as const) {
  only(`list ${state} sandboxes`, async ({ sandboxTestId }) => {
    const extra = await Sandbox.create({ metadata: { sandboxTestId } })
    if (state === 'paused') await extra.betaPause()
    try {
      const got = await Sandbox.list({ query: { metadata: { sandboxTestId }, state: [state] } }).nextItems()
      assert.isAtLeast(got.length, 1)
      assert.isTrue(got.some((s) => s.sandboxId === extra.sandboxId && s.state === state))
    } finally {
      await extra.kill()
    }
  })
}

/** Upstream's two-page walk: newest first, one per page. */
async function twoPages(
  states: ('running' | 'paused')[],
  sandboxTestId: string,
  first: [string, string],
  second: [string, string]
) {
  const pages = Sandbox.list({ limit: 1, query: { metadata: { sandboxTestId }, state: states } })
  const p1 = await pages.nextItems()
  assert.equal(p1.length, 1)
  assert.equal(p1[0].state, first[1])
  assert.isTrue(pages.hasNext)
  assert.notEqual(pages.nextToken, undefined)
  assert.equal(p1[0].sandboxId, first[0])
  const p2 = await pages.nextItems()
  assert.equal(p2.length, 1)
  assert.equal(p2[0].state, second[1])
  assert.isFalse(pages.hasNext)
  assert.equal(pages.nextToken, undefined)
  assert.equal(p2[0].sandboxId, second[0])
}

only('paginate running sandboxes', async ({ sandbox, sandboxTestId }) => {
  const extra = await Sandbox.create({ metadata: { sandboxTestId } })
  try {
    await twoPages(['running'], sandboxTestId, [extra.sandboxId, 'running'], [sandbox.sandboxId, 'running'])
  } finally {
    await extra.kill()
  }
})

only('paginate paused sandboxes', async ({ sandbox, sandboxTestId }) => {
  await sandbox.betaPause()
  const extra = await Sandbox.create({ metadata: { sandboxTestId } })
  await extra.betaPause()
  try {
    await twoPages(['paused'], sandboxTestId, [extra.sandboxId, 'paused'], [sandbox.sandboxId, 'paused'])
  } finally {
    await extra.kill()
  }
})

only('paginate running and paused sandboxes', async ({ sandbox, sandboxTestId }) => {
  const extra = await Sandbox.create({ metadata: { sandboxTestId } })
  await extra.betaPause()
  try {
    await twoPages(['running', 'paused'], sandboxTestId, [extra.sandboxId, 'paused'], [sandbox.sandboxId, 'running'])
  } finally {
    await extra.kill()
  }
})

only('paginate iterator', async ({ sandbox, sandboxTestId }) => {
  const pages = Sandbox.list({ query: { metadata: { sandboxTestId } } })
  const all: SandboxInfo[] = []
  while (pages.hasNext) all.push(...(await pages.nextItems()))
  assert.isAtLeast(all.length, 1)
  assert.isTrue(all.some((s) => s.sandboxId === sandbox.sandboxId))
})

only('list sandboxes with order', async ({ sandbox, sandboxTestId }) => {
  const extra = await Sandbox.create({ metadata: { sandboxTestId } })
  try {
    const asc = await Sandbox.list({ query: { metadata: { sandboxTestId } }, order: 'asc' }).nextItems()
    assert.isAtLeast(asc.length, 2)
    assert.equal(asc[0].sandboxId, sandbox.sandboxId)
    assert.equal(asc[asc.length - 1].sandboxId, extra.sandboxId)
    const desc = await Sandbox.list({ query: { metadata: { sandboxTestId } }, order: 'desc' }).nextItems()
    assert.isAtLeast(desc.length, 2)
    assert.equal(desc[0].sandboxId, extra.sandboxId)
    assert.equal(desc[desc.length - 1].sandboxId, sandbox.sandboxId)
  } finally {
    await extra.kill()
  }
})

only('list sandboxes started after', async ({ sandbox, sandboxTestId }) => {
  const info = await sandbox.getInfo()
  const at = await Sandbox.list({ query: { metadata: { sandboxTestId }, startedAfter: info.startedAt } }).nextItems()
  assert.isTrue(at.some((s) => s.sandboxId === sandbox.sandboxId))
  const later = await Sandbox.list({
    query: { metadata: { sandboxTestId }, startedAfter: new Date(info.startedAt.getTime() + 1000) },
  }).nextItems()
  assert.isFalse(later.some((s) => s.sandboxId === sandbox.sandboxId))
})

only('list sandboxes with template filter', async ({ sandbox, sandboxTestId }) => {
  const info = await sandbox.getInfo()
  const same = await Sandbox.list({ query: { metadata: { sandboxTestId }, template: info.templateId } }).nextItems()
  assert.isTrue(same.some((s) => s.sandboxId === sandbox.sandboxId))
  const none = await Sandbox.list({ query: { metadata: { sandboxTestId }, template: 'unknown-template' } }).nextItems()
  assert.equal(none.length, 0)
})
