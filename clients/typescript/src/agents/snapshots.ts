/**
 * The SDK's snapshot specs on stasis. Without a spec, a saved session is
 * backed by a native stasis snapshot (memory and files, on the daemon). With
 * one, the workspace is persisted as the SDK's providers persist it:
 * - `noop`: nothing is snapshotted (and an earlier local snapshot is
 *   removed); a session whose sandbox is gone cannot be restored;
 * - `local` (`baseDir`, default `$OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR`, else
 *   the SDK's state directory): the workspace archive in a directory of its
 *   own on this machine. It is kept as the archive, never extracted here: its
 *   content is the sandbox's, and it is only ever extracted inside a sandbox,
 *   after the archive checks and limits;
 * - `remote` (`id`, `store`): the archive saved in the spec's store.
 * Both record a fingerprint of the workspace tree, so a resume that finds the
 * sandbox alive but its workspace changed since the save restores the
 * snapshot over it.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { NoopSnapshotSpec, type RemoteSnapshotStore, type Snapshot, type SnapshotSpec } from '@openai/agents/sandbox';

export const FINGERPRINT_VERSION = 'workspace_tree_sha256_v1';

export type SnapshotMode = 'stasis' | 'noop' | 'local' | 'remote';

export function snapshotMode(spec: SnapshotSpec | null | undefined): SnapshotMode {
  if (!spec) return 'stasis';
  if (spec.type === 'noop' || spec.type === 'local' || spec.type === 'remote') return spec.type;
  throw new TypeError(`unknown snapshot spec type ${JSON.stringify(spec.type)} (use local, remote or noop, or none for stasis snapshots)`);
}

/** The spec as the session state keeps it (a remote store is not serializable: it comes back from the client's options). */
export function serializeSnapshotSpec(spec: SnapshotSpec | null | undefined): Record<string, unknown> | null {
  if (!spec) return null;
  if (spec.type === 'remote') {
    return { type: 'remote', ...(spec.id !== undefined ? { id: spec.id } : {}), ...(spec.metadata !== undefined ? { metadata: spec.metadata } : {}) };
  }
  if (spec.type === 'local') return { type: 'local', ...(typeof spec.baseDir === 'string' ? { baseDir: spec.baseDir } : {}) };
  return { type: spec.type };
}

/** A serialized spec with what the client's configured spec supplies (the remote store). */
export function rehydrateSnapshotSpec(raw: unknown, configured: SnapshotSpec | null | undefined): SnapshotSpec | null {
  if (!raw || typeof raw !== 'object') return configured ?? null;
  const r = raw as Record<string, unknown>;
  if (r.type === 'noop') return new NoopSnapshotSpec();
  if (r.type === 'remote') {
    const store = configured?.type === 'remote' ? configured.store : undefined;
    return { ...r, type: 'remote', ...(store ? { store } : {}) } as SnapshotSpec;
  }
  if (r.type === 'local') return { ...r, type: 'local' };
  return configured ?? null;
}

/** Where local snapshots go without a `baseDir`: the SDK's default. */
export function defaultLocalSnapshotDir(): string {
  const configured = process.env.OPENAI_AGENTS_SANDBOX_SNAPSHOT_DIR?.trim();
  if (configured) return configured;
  const state = process.env.XDG_STATE_HOME?.trim();
  const home = homedir();
  const base = state && isAbsolute(state) ? state : home ? join(home, '.local', 'state') : tmpdir();
  return join(base, 'openai-agents-js', 'sandbox-snapshots');
}

const ARCHIVE = 'workspace.tar';

/** Save the workspace archive by the spec; the snapshot to record. */
export async function saveSnapshot(spec: SnapshotSpec, data: Uint8Array): Promise<Snapshot> {
  if (spec.type === 'local') {
    const id = randomUUID();
    const path = join(typeof spec.baseDir === 'string' ? spec.baseDir : defaultLocalSnapshotDir(), id);
    await mkdir(path, { recursive: true, mode: 0o700 });
    await writeFile(join(path, ARCHIVE), data, { mode: 0o600, flag: 'wx' });
    return { type: 'local', id, path };
  }
  if (spec.type === 'remote') {
    const saved = await remoteStore(spec).save({
      ...(typeof spec.id === 'string' ? { id: spec.id } : {}),
      data,
      ...(spec.metadata ? { metadata: spec.metadata as Record<string, unknown> } : {}),
    });
    return { type: 'remote', id: saved.id };
  }
  throw new TypeError(`a ${spec.type} snapshot spec saves nothing`);
}

/** The archive of a snapshot saved by {@link saveSnapshot}. */
export async function loadSnapshot(snapshot: Snapshot, spec: SnapshotSpec | null): Promise<Uint8Array> {
  if (snapshot.type === 'local' && typeof snapshot.path === 'string') return new Uint8Array(await readFile(join(snapshot.path, ARCHIVE)));
  if (snapshot.type === 'remote') {
    if (!spec || spec.type !== 'remote') throw new TypeError('a remote snapshot needs the remote snapshot spec (with its store) in the client options');
    return (await remoteStore(spec).load({ id: snapshot.id })).data;
  }
  throw new TypeError(`cannot load a ${snapshot.type} snapshot`);
}

/** Remove a local snapshot that a newer one (or a noop spec) replaces. */
export async function dropSnapshot(snapshot: Snapshot | null | undefined): Promise<void> {
  if (snapshot?.type === 'local' && typeof snapshot.path === 'string') await rm(snapshot.path, { recursive: true, force: true });
}

function remoteStore(spec: SnapshotSpec): RemoteSnapshotStore {
  const store = spec.store as RemoteSnapshotStore | undefined;
  if (!store || typeof store.save !== 'function') throw new TypeError('a remote snapshot spec needs a store');
  return store;
}

/**
 * A shell script printing a digest of the workspace tree `$1` (each path in
 * byte order with its type, mode and content digest or link target),
 * leaving out the paths `$2...` (the manifest's ephemeral entries).
 */
export const FINGERPRINT_SCRIPT = `root=$1; shift
cd "$root" || exit 1
find . -mindepth 1 | LC_ALL=C sort | while IFS= read -r p; do
  skip=
  for e in "$@"; do case "$p" in "./$e"|"./$e"/*) skip=1;; esac; done
  [ -n "$skip" ] && continue
  if [ -L "$p" ]; then printf 'l %s %s\\n' "$p" "$(readlink "$p")"
  elif [ -f "$p" ]; then printf 'f %s %s %s\\n' "$p" "$(stat -c %a "$p")" "$(sha256sum < "$p" | cut -c1-64)"
  elif [ -d "$p" ]; then printf 'd %s %s\\n' "$p" "$(stat -c %a "$p")"
  else printf 'o %s\\n' "$p"; fi
done | sha256sum | cut -c1-64`;
