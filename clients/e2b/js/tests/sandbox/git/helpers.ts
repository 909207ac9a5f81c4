// What the git tests share, as upstream's helpers.ts offers it: the
// author and credentials they use, a scratch directory per test, a repo
// (empty or with one commit) and a `git daemon` inside the sandbox to act
// as the remote. Upstream opens each test with createBaseDir and a
// try/finally cleanup (and the same again around the daemon): here
// withBaseDir and withGitDaemon carry that pair once.
import { randomUUID } from 'node:crypto'
import type { GitFileStatus, GitStatus, Sandbox } from 'e2b'

export const AUTHOR_NAME = 'Sandbox Bot'
export const AUTHOR_EMAIL = 'sandbox@example.com'
export const AUTHOR = { authorName: AUTHOR_NAME, authorEmail: AUTHOR_EMAIL }
export const USERNAME = 'git'
export const PASSWORD = 'token'
export const HOST = 'example.com'
export const PROTOCOL = 'https'

/** Runs `body` in a fresh directory under /tmp/test-git, removed afterwards. */
export async function withBaseDir(sandbox: Sandbox, body: (baseDir: string) => Promise<void>) {
  const baseDir = `/tmp/test-git/${randomUUID()}`
  await sandbox.commands.run(`rm -rf "${baseDir}" && mkdir -p "${baseDir}"`)
  try {
    await body(baseDir)
  } finally {
    await sandbox.commands.run(`rm -rf "${baseDir}"`)
  }
}

/** A command's standard output without surrounding whitespace. */
export async function stdoutOf(sandbox: Sandbox, cmd: string): Promise<string> {
  return (await sandbox.commands.run(cmd)).stdout.trim()
}

/** The status entry of one file, if git reports it. */
export function entryOf(status: GitStatus, name: string): GitFileStatus | undefined {
  return status.fileStatus.find((f) => f.name === name)
}

/** An empty repository at `<baseDir>/repo` whose first branch is main. */
export async function createRepo(sandbox: Sandbox, baseDir: string): Promise<string> {
  const repo = `${baseDir}/repo`
  await sandbox.git.init(repo, { initialBranch: 'main' })
  return repo
}

/** The same with README.md ("hello\n") committed as "Initial commit". */
export async function createRepoWithCommit(sandbox: Sandbox, baseDir: string): Promise<string> {
  const repo = await createRepo(sandbox, baseDir)
  await sandbox.files.write(`${repo}/README.md`, 'hello\n')
  await sandbox.git.add(repo)
  await sandbox.git.commit(repo, 'Initial commit', AUTHOR)
  return repo
}

export interface GitDaemon {
  /** The bare repository the daemon serves, `<baseDir>/remote.git`. */
  remotePath: string
  /** Its git:// address on the sandbox's loopback. */
  remoteUrl: string
  port: number
}

/**
 * Serves `baseDir` with `git daemon` (pushes allowed) while `body` runs,
 * with an empty bare repository remote.git in it, then stops the daemon.
 * Upstream sleeps a second after starting it; here the helper waits until
 * the daemon answers (a slow microVM may need longer than a second).
 */
export async function withGitDaemon(
  sandbox: Sandbox,
  baseDir: string,
  body: (daemon: GitDaemon) => Promise<void>
) {
  const remotePath = `${baseDir}/remote.git`
  await sandbox.commands.run(`git init --bare --initial-branch=main "${remotePath}"`)
  const port = 9418 + Math.floor(Math.random() * 1000)
  const remoteUrl = `git://127.0.0.1:${port}/remote.git`
  const handle = await sandbox.commands.run(
    `git daemon --reuseaddr --base-path="${baseDir}" --export-all --enable=receive-pack ` +
      `--informative-errors --listen=127.0.0.1 --port=${port}`,
    { background: true }
  )
  try {
    await sandbox.commands.run(
      `n=0; until git ls-remote "${remoteUrl}" >/dev/null 2>&1; do ` +
        `n=$((n+1)); [ $n -lt 300 ] || exit 1; sleep 0.1; done`
    )
    await body({ remotePath, remoteUrl, port })
  } finally {
    await handle.kill()
  }
}
