/**
 * The check of a workspace archive before it is extracted in a sandbox: a
 * tar whose members would land outside the workspace (absolute names, `..`
 * segments), whose links point out of it (absolute or escaping symlink and
 * hard link targets), that holds devices or FIFOs, or that exceeds the
 * archive limits is refused before any of it is written.
 */
import type { ResolvedSandboxArchiveLimits } from '@openai/agents/sandbox';

export interface TarMember {
  name: string;
  type: string;
  size: number;
  linkname: string;
}

const decoder = new TextDecoder();

function field(b: Uint8Array, start: number, len: number): string {
  const s = b.subarray(start, start + len);
  const end = s.indexOf(0);
  return decoder.decode(end < 0 ? s : s.subarray(0, end));
}

function octal(b: Uint8Array, start: number, len: number): number {
  // Base-256 (GNU) for large sizes: the high bit of the first byte.
  if (b[start]! & 0x80) {
    let n = 0;
    for (let i = start + 1; i < start + len; i++) n = n * 256 + b[i]!;
    return n;
  }
  const s = field(b, start, len).trim();
  return s ? parseInt(s, 8) : 0;
}

function paxRecords(data: Uint8Array): Record<string, string> {
  const out: Record<string, string> = {};
  const text = decoder.decode(data);
  let i = 0;
  while (i < text.length) {
    const sp = text.indexOf(' ', i);
    if (sp < 0) break;
    const len = parseInt(text.slice(i, sp), 10);
    if (!(len > 0)) break;
    const rec = text.slice(sp + 1, i + len - 1);
    const eq = rec.indexOf('=');
    if (eq > 0) out[rec.slice(0, eq)] = rec.slice(eq + 1);
    i += len;
  }
  return out;
}

/** The members of a tar (ustar, GNU long names, pax path/linkpath). */
export function tarMembers(tar: Uint8Array): TarMember[] {
  const out: TarMember[] = [];
  let off = 0;
  let longName: string | undefined;
  let longLink: string | undefined;
  let pax: Record<string, string> = {};
  while (off + 512 <= tar.length) {
    const h = tar.subarray(off, off + 512);
    if (h.every((x) => x === 0)) break;
    const size = octal(h, 124, 12);
    const type = String.fromCharCode(h[156]! || 0x30);
    const data = tar.subarray(off + 512, off + 512 + size);
    off += 512 + Math.ceil(size / 512) * 512;
    if (type === 'L') {
      longName = field(data, 0, data.length);
      continue;
    }
    if (type === 'K') {
      longLink = field(data, 0, data.length);
      continue;
    }
    if (type === 'x') {
      pax = paxRecords(data);
      continue;
    }
    if (type === 'g') continue;
    const prefix = field(h, 345, 155);
    const base = field(h, 0, 100);
    const name = pax.path ?? longName ?? (prefix ? `${prefix}/${base}` : base);
    const linkname = pax.linkpath ?? longLink ?? field(h, 157, 100);
    out.push({ name, type, size, linkname });
    longName = longLink = undefined;
    pax = {};
  }
  return out;
}

/** Lexically normalized segments of `path` relative to the root, or null when it leaves it. */
function inside(segments: string[]): boolean {
  let depth = 0;
  for (const s of segments) {
    if (s === '' || s === '.') continue;
    if (s === '..') {
      depth -= 1;
      if (depth < 0) return false;
    } else depth += 1;
  }
  return true;
}

/** Why an archive may not be extracted: a message and the SDK's details (`reason`, and `limit`, `actual`, `member` for limits). */
export interface ArchiveProblem {
  message: string;
  details: { reason: string; limit?: number; actual?: number; member?: string };
}

function problem(message: string, reason: string, extra: Omit<ArchiveProblem['details'], 'reason'> = {}): ArchiveProblem {
  return { message, details: { reason, ...extra } };
}

/**
 * Why the archive may not be extracted into the workspace, or undefined when
 * it may. Limits count as the SDK's own providers do: every member but the
 * archive's root entry (`.` / `./`), in order, the first one over a limit
 * named.
 */
export function archiveProblem(tar: Uint8Array, limits: ResolvedSandboxArchiveLimits | null): ArchiveProblem | undefined {
  if (limits?.maxInputBytes != null && tar.byteLength > limits.maxInputBytes) {
    return problem('Workspace archive input size exceeds limit.', 'archive input size exceeds limit', {
      limit: limits.maxInputBytes,
      actual: tar.byteLength,
    });
  }
  let count = 0;
  let total = 0;
  for (const m of tarMembers(tar)) {
    const name = m.name.replace(/^(\.\/)+/, '');
    if (m.name.startsWith('/') || !inside(name.split('/'))) {
      return problem(`member ${m.name} lands outside the workspace`, 'member outside the workspace', { member: m.name });
    }
    if (m.type === '3' || m.type === '4' || m.type === '6') {
      return problem(`member ${m.name} is a device or FIFO`, 'special file', { member: m.name });
    }
    if (m.type === '2') {
      const dir = name.split('/').slice(0, -1);
      if (m.linkname.startsWith('/') || !inside([...dir, ...m.linkname.split('/')])) {
        return problem(`symlink ${m.name} points outside the workspace (${m.linkname})`, 'symlink outside the workspace', { member: m.name });
      }
    }
    if (m.type === '1' && (m.linkname.startsWith('/') || !inside(m.linkname.replace(/^(\.\/)+/, '').split('/')))) {
      return problem(`hard link ${m.name} points outside the workspace (${m.linkname})`, 'hard link outside the workspace', { member: m.name });
    }
    if (name.replace(/\/+$/, '') === '' || name === '.') continue; // the root entry itself
    count += 1;
    if (limits?.maxMembers != null && count > limits.maxMembers) {
      return problem('Workspace archive member count exceeds limit.', 'archive member count exceeds limit', {
        limit: limits.maxMembers,
        actual: count,
        member: name,
      });
    }
    total += m.size;
    if (limits?.maxExtractedBytes != null && total > limits.maxExtractedBytes) {
      return problem('Workspace archive extracted size exceeds limit.', 'archive extracted size exceeds limit', {
        limit: limits.maxExtractedBytes,
        actual: total,
        member: name,
      });
    }
  }
  return undefined;
}
