/** The transport: fetch with the token, the actor, timeouts and typed errors. */
import { readFileSync } from 'node:fs';

import { ConnectionFailed, InvalidArgument, StasisError, Timeout, errorFromResponse } from './errors.js';
import { ROUTES, type RouteKey } from './routes.js';

export const DEFAULT_URL = 'http://127.0.0.1:7070';

export interface ConnectionOptions {
  /** Daemon URL; default `$STASIS_URL`, else `http://127.0.0.1:7070`. */
  baseUrl?: string;
  /** API token; default `$STASIS_TOKEN`, else the contents of `tokenFile` / `$STASIS_TOKEN_FILE`. */
  token?: string;
  tokenFile?: string;
  /** Recorded as the actor of approvals and audit entries (`x-stasis-actor`); default `$STASIS_ACTOR`. */
  actor?: string;
  /** Per-request timeout in milliseconds (default 30000); long calls add their own time. */
  timeoutMs?: number;
}

/** The token: explicit, `$STASIS_TOKEN`, or read from a token file; undefined when none. */
export function resolveToken(token?: string, tokenFile?: string): string | undefined {
  if (token) return token.trim();
  const env = process.env.STASIS_TOKEN;
  if (env) return env.trim();
  const path = tokenFile ?? process.env.STASIS_TOKEN_FILE;
  if (!path) return undefined;
  let text: string;
  try {
    text = readFileSync(path, 'utf8').trim();
  } catch (e) {
    throw new InvalidArgument(`cannot read the token file ${path}: ${(e as Error).message}`);
  }
  if (!text) throw new InvalidArgument(`the token file ${path} is empty`);
  return text;
}

export interface RequestOptions {
  ids?: Record<string, string | number>;
  query?: Record<string, string | number | boolean | undefined>;
  json?: unknown;
  body?: Uint8Array | ReadableStream<Uint8Array>;
  contentType?: string;
  /** Milliseconds on top of the client's timeout (long polls, long commands). */
  extraTimeoutMs?: number;
  /** Path after the route's template (the port proxy's inner path). */
  suffix?: string;
}

export class Http {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly actor?: string;
  private readonly token?: string;

  constructor(opts: ConnectionOptions = {}) {
    this.baseUrl = (opts.baseUrl ?? process.env.STASIS_URL ?? DEFAULT_URL).replace(/\/+$/, '');
    this.token = resolveToken(opts.token, opts.tokenFile);
    this.actor = opts.actor ?? process.env.STASIS_ACTOR ?? undefined;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  headers(): Record<string, string> {
    const h: Record<string, string> = { 'user-agent': 'stasis-client-typescript/0.1' };
    if (this.token) h.authorization = `Bearer ${this.token}`;
    if (this.actor) h['x-stasis-actor'] = this.actor;
    return h;
  }

  /** The URL of a route with its ids filled in. */
  url(route: RouteKey, opts: RequestOptions = {}): string {
    let path: string = ROUTES[route].path;
    for (const [k, v] of Object.entries(opts.ids ?? {})) {
      path = path.replace(`{${k}}`, encodeURIComponent(String(v)));
    }
    if (opts.suffix !== undefined) path = path.replace('/{path}', opts.suffix);
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.query ?? {})) {
      if (v !== undefined) q.set(k, String(v));
    }
    const qs = q.toString();
    return `${this.baseUrl}${path}${qs ? `?${qs}` : ''}`;
  }

  /** Send a request; an answer outside the route's success statuses throws its typed error. */
  async raw(route: RouteKey, opts: RequestOptions = {}): Promise<Response> {
    const def = ROUTES[route];
    const headers = this.headers();
    let body: BodyInit | undefined;
    if (opts.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(opts.json);
    } else if (opts.body !== undefined) {
      headers['content-type'] = opts.contentType ?? 'application/octet-stream';
      body = opts.body as BodyInit;
    }
    const timeout = this.timeoutMs + (opts.extraTimeoutMs ?? 0);
    let resp: Response;
    try {
      resp = await fetch(this.url(route, opts), {
        method: def.method.toUpperCase(),
        headers,
        body,
        signal: AbortSignal.timeout(timeout),
        ...(body instanceof ReadableStream ? { duplex: 'half' } : {}),
      } as RequestInit);
    } catch (e) {
      throw transportError(e, route, timeout, this.baseUrl);
    }
    if (!(def.ok as readonly number[]).includes(resp.status)) {
      throw errorFromResponse(resp.status, await resp.text());
    }
    return resp;
  }

  async json<T>(route: RouteKey, opts: RequestOptions = {}): Promise<T> {
    const resp = await this.raw(route, opts);
    const text = await resp.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  async bytes(route: RouteKey, opts: RequestOptions = {}): Promise<Uint8Array> {
    const resp = await this.raw(route, opts);
    return new Uint8Array(await resp.arrayBuffer());
  }

  async none(route: RouteKey, opts: RequestOptions = {}): Promise<void> {
    const resp = await this.raw(route, opts);
    await resp.arrayBuffer();
  }
}

function transportError(e: unknown, route: string, timeoutMs: number, url: string): StasisError {
  const err = e as Error & { cause?: { code?: string } };
  if (err.name === 'TimeoutError' || err.name === 'AbortError') {
    return new Timeout(`${route}: no answer from ${url} within ${timeoutMs} ms`, { code: 'timeout' });
  }
  const why = err.cause?.code ?? err.message;
  return new ConnectionFailed(`${route}: cannot reach the stasis daemon at ${url}: ${why}`);
}
