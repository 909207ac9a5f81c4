import { expect } from 'vitest'
import type { SandboxMetrics } from 'e2b'
import { isDebug, sandboxTest, wait } from '../setup'

async function firstMetrics(get: () => Promise<SandboxMetrics[]>): Promise<SandboxMetrics[]> {
  let m: SandboxMetrics[] = []
  for (let i = 0; i < 60 && m.length === 0; i++) {
    m = await get()
    if (m.length === 0) await wait(500)
  }
  return m
}

sandboxTest.skipIf(isDebug)('sbx metrics', { timeout: 60_000 }, async ({ sandbox }) => {
  const metrics = await firstMetrics(() => sandbox.getMetrics())
  expect(metrics.length).toBeGreaterThan(0)
  const m = metrics[0]
  expect(m.diskTotal).toBeDefined()
  expect(m.diskUsed).toBeDefined()
  expect(m.memTotal).toBeDefined()
  expect(m.memUsed).toBeDefined()
  expect(m.cpuUsedPct).toBeDefined()
  expect(m.cpuCount).toBeDefined()
})

sandboxTest.skipIf(isDebug)('sbx metrics time range', { timeout: 60_000 }, async ({ sandbox }) => {
  const start = new Date()
  let end = new Date()
  const metrics = await firstMetrics(() => {
    end = new Date()
    return sandbox.getMetrics({ start, end })
  })
  expect(metrics.length).toBeGreaterThan(0)
  // Upstream's slack: timestamps sit on collection buckets.
  const slack = 10_000
  for (const m of metrics) {
    expect(m.timestamp.getTime()).toBeGreaterThanOrEqual(start.getTime() - slack)
    expect(m.timestamp.getTime()).toBeLessThanOrEqual(end.getTime() + slack)
  }
  const before = await sandbox.getMetrics({
    start: new Date(start.getTime() - 60 * 60 * 1000),
    end: new Date(start.getTime() - 30 * 60 * 1000),
  })
  expect(before).toHaveLength(0)
})
