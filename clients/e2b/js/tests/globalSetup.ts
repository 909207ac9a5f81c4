// The daemon the ported tests run against: the real `stasis serve` on
// loopback (the TypeScript client's harness starts it), on the backend
// named by STASIS_E2B_BACKEND (process unless it says microvm), with one
// tenant token. The E2B SDK is configured only through its environment
// variables, exactly as the README tells users to: E2B_API_URL and
// E2B_SANDBOX_URL at `$STASIS_URL/e2b`, E2B_API_KEY the hex form of the
// token.
import { existsSync, readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
// @ts-expect-error: the harness is plain JavaScript
import { Daemon } from '../../../typescript/test/daemon.mjs'

let daemon: { url: string; tokenFile?: string; stop(): Promise<void>; log(): string } | undefined

export function apiKeyOf(token: string): string {
  return `e2b_${Buffer.from(token, 'utf8').toString('hex')}`
}

export async function setup() {
  const backend = process.env.STASIS_E2B_BACKEND === 'microvm' ? 'microvm' : 'process'
  // The images directory (stasis-base, the code interpreter) for the
  // process backend too: E2B's `base` and `code-interpreter-v1` are images.
  const img = process.env.STASIS_IMAGE_DIR
  const extra = backend === 'process' && img && existsSync(img) ? ['--images', dirname(resolve(img))] : []
  daemon = await new Daemon(backend, extra).start()
  if (!daemon!.tokenFile) throw new Error('the test daemon wrote no token file')
  const token = readFileSync(daemon!.tokenFile, 'utf8').trim()
  process.env.STASIS_URL = daemon!.url
  process.env.E2B_API_URL = `${daemon!.url}/e2b`
  process.env.E2B_SANDBOX_URL = `${daemon!.url}/e2b`
  process.env.E2B_API_KEY = apiKeyOf(token)
  process.env.E2B_DOMAIN = new URL(daemon!.url).host
}

export async function teardown() {
  if (daemon) {
    if (process.env.STASIS_E2B_KEEP_LOG) console.error(daemon.log())
    await daemon.stop()
  }
}
