/** The entry point: a connection to one stasis daemon. */
import { Http, type ConnectionOptions } from './http.js';
import { Runs } from './runs.js';
import { Sandbox, createSandbox, listPage, listSandboxes, type CreateSandboxOptions, type ListOptions } from './sandbox.js';
import type { SandboxInfo, SnapshotInfo, TemplateInfo } from './types.js';

export class StasisClient {
  readonly http: Http;
  readonly snapshots: Snapshots;
  readonly templates: Templates;
  readonly runs: Runs;

  constructor(opts: ConnectionOptions = {}) {
    this.http = new Http(opts);
    this.snapshots = new Snapshots(this.http);
    this.templates = new Templates(this.http);
    this.runs = new Runs(this.http);
  }

  get baseUrl(): string {
    return this.http.baseUrl;
  }

  /** True when the daemon answers `/healthz`. */
  async health(): Promise<boolean> {
    await this.http.none('health');
    return true;
  }

  async create(opts: CreateSandboxOptions = {}): Promise<Sandbox> {
    return createSandbox(this.http, opts);
  }

  async get(id: string): Promise<Sandbox> {
    return new Sandbox(this.http, await this.http.json<SandboxInfo>('sandbox.get', { ids: { id } }));
  }

  /** Every sandbox matching the filters (all pages). */
  async list(opts: ListOptions = {}): Promise<Sandbox[]> {
    return listSandboxes(this.http, opts);
  }

  /** One page (`limit` 1 to 1000) and the cursor of the next. */
  async listPage(opts: ListOptions & { limit?: number; cursor?: string } = {}): Promise<{ sandboxes: Sandbox[]; nextCursor?: string }> {
    return listPage(this.http, opts);
  }
}

export class Snapshots {
  constructor(private readonly http: Http) {}

  async list(): Promise<SnapshotInfo[]> {
    return this.http.json<SnapshotInfo[]>('snapshots.list');
  }

  async get(id: string): Promise<SnapshotInfo> {
    return this.http.json<SnapshotInfo>('snapshots.get', { ids: { id } });
  }

  async delete(id: string): Promise<void> {
    await this.http.none('snapshots.delete', { ids: { id } });
  }

  /** A new sandbox from the snapshot (optionally under another manifest of the same backend). */
  async restore(id: string, opts: { manifest?: Record<string, unknown> } = {}): Promise<Sandbox> {
    const info = await this.http.json<SandboxInfo>('snapshots.restore', {
      ids: { id },
      json: opts.manifest ? { manifest: opts.manifest } : {},
      extraTimeoutMs: 300_000,
    });
    return new Sandbox(this.http, info);
  }

  /** The snapshot as one encrypted, self-verifying file. */
  async export(id: string): Promise<Uint8Array> {
    return this.http.bytes('snapshots.export', { ids: { id }, extraTimeoutMs: 600_000 });
  }

  async import(data: Uint8Array): Promise<SnapshotInfo> {
    return this.http.json<SnapshotInfo>('snapshots.import', { body: data, extraTimeoutMs: 600_000 });
  }
}

export class Templates {
  constructor(private readonly http: Http) {}

  /** Publish a sandbox's memory and disk as the next version of template `name`. */
  async create(name: string, fromSandbox: string): Promise<TemplateInfo> {
    return this.http.json<TemplateInfo>('templates.create', { json: { name, from_sandbox: fromSandbox }, extraTimeoutMs: 300_000 });
  }

  async list(): Promise<TemplateInfo[]> {
    return this.http.json<TemplateInfo[]>('templates.list');
  }

  async get(name: string): Promise<{ name: string; latest: number; versions: TemplateInfo[] }> {
    return this.http.json('templates.get', { ids: { name } });
  }

  async delete(name: string): Promise<void> {
    await this.http.none('templates.delete', { ids: { name } });
  }
}
