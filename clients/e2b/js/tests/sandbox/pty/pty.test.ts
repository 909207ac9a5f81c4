// Upstream: pty/kill, pty/ptyConnect, pty/ptyCreate, pty/resize,
// pty/sendInput (one file here; each upstream test keeps its name).
import { assert, expect } from 'vitest'
import { ProcessExitError } from 'e2b'
import { sandboxTest } from '../../setup'

const bytes = (s: string) => new Uint8Array(Buffer.from(s))

sandboxTest('kill PTY', async ({ sandbox }) => {
  const t = await sandbox.pty.create({ cols: 80, rows: 24, onData: () => {} })
  assert.isTrue(await sandbox.pty.kill(t.pid))
  await expect(sandbox.commands.run(`kill -0 ${t.pid}`)).rejects.toThrowError(ProcessExitError)
})

sandboxTest('kill non-existing PTY', async ({ sandbox }) => {
  await expect(sandbox.pty.kill(999999)).resolves.toBe(false)
})

sandboxTest('pty connect/reconnect', async ({ sandbox }) => {
  const dec = new TextDecoder()
  let first = ''
  let second = ''
  const t = await sandbox.pty.create({
    cols: 80,
    rows: 24,
    onData: (d: Uint8Array) => {
      first += dec.decode(d)
    },
    envs: { FOO: 'bar' },
  })
  await sandbox.pty.sendInput(t.pid, bytes('echo $FOO\n'))
  await new Promise((r) => setTimeout(r, 300))
  await t.disconnect()
  const again = await sandbox.pty.connect(t.pid, {
    onData: (d: Uint8Array) => {
      second += dec.decode(d)
    },
  })
  await sandbox.pty.sendInput(t.pid, bytes('echo $FOO\nexit\n'))
  await again.wait()
  assert.equal(t.pid, again.pid)
  assert.equal(again.exitCode, 0)
  assert.include(first, 'bar')
  assert.include(second, 'bar')
})

sandboxTest('create PTY', async ({ sandbox }) => {
  const dec = new TextDecoder()
  let out = ''
  const t = await sandbox.pty.create({
    cols: 80,
    rows: 24,
    onData: (d: Uint8Array) => {
      out += dec.decode(d)
    },
    envs: { ABC: '123' },
  })
  await sandbox.pty.sendInput(t.pid, bytes('echo $ABC\nexit\n'))
  await t.wait()
  assert.equal(t.exitCode, 0)
  assert.include(out, '123')
})

sandboxTest('resize', async ({ sandbox }) => {
  const dec = new TextDecoder()
  let out = ''
  const onData = (d: Uint8Array) => {
    out += dec.decode(d)
  }
  const t = await sandbox.pty.create({ cols: 80, rows: 24, onData })
  await sandbox.pty.sendInput(t.pid, bytes('tput cols\nexit\n'))
  await t.wait()
  assert.equal(t.exitCode, 0)
  assert.include(out, '80')

  out = ''
  const r = await sandbox.pty.create({ cols: 80, rows: 24, onData })
  await sandbox.pty.resize(r.pid, { cols: 100, rows: 24 })
  await sandbox.pty.sendInput(r.pid, bytes('tput cols\nexit\n'))
  await r.wait()
  assert.equal(r.exitCode, 0)
  assert.include(out, '100')
})

sandboxTest('send input', async ({ sandbox }) => {
  const t = await sandbox.pty.create({ cols: 80, rows: 24, onData: () => null })
  await sandbox.pty.sendInput(t.pid, bytes('exit\n'))
  await t.wait()
  expect(t.exitCode).toBe(0)
})
