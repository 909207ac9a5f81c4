/**
 * Every route this client calls: method, path template (a key of the
 * generated OpenAPI `paths`) and the statuses it treats as success. The type
 * check below fails the build when a route or method is not in the daemon's
 * document; the contract test checks the same against a live daemon.
 */
import type { paths } from './generated/api.js';

export type Method = 'get' | 'post' | 'put' | 'delete' | 'patch';
export type RouteDef = { readonly method: Method; readonly path: keyof paths; readonly ok: readonly number[] };

const r = <M extends Method, P extends keyof paths>(method: M, path: P, ok: readonly number[] = [200]) =>
  ({ method, path, ok }) as const;

export const ROUTES = {
  health: r('get', '/healthz'),
  'sandbox.create': r('post', '/v1/sandboxes', [201]),
  'sandbox.list': r('get', '/v1/sandboxes'),
  'sandbox.get': r('get', '/v1/sandboxes/{id}'),
  'sandbox.destroy': r('delete', '/v1/sandboxes/{id}'),
  'sandbox.exec': r('post', '/v1/sandboxes/{id}/exec'),
  'sandbox.exec_stream': r('post', '/v1/sandboxes/{id}/exec/stream'),
  'sandbox.pause': r('post', '/v1/sandboxes/{id}/pause'),
  'sandbox.resume': r('post', '/v1/sandboxes/{id}/resume'),
  'sandbox.evict': r('post', '/v1/sandboxes/{id}/evict'),
  'sandbox.usage': r('get', '/v1/sandboxes/{id}/usage'),
  'sandbox.fork': r('post', '/v1/sandboxes/{id}/fork', [201]),
  'sandbox.outputs': r('get', '/v1/sandboxes/{id}/outputs'),
  'sandbox.snapshot': r('post', '/v1/sandboxes/{id}/snapshots', [201]),
  'network.get': r('get', '/v1/sandboxes/{id}/network'),
  'network.set': r('patch', '/v1/sandboxes/{id}/network'),
  'sandbox.lifecycle': r('patch', '/v1/sandboxes/{id}/lifecycle'),
  'files.put': r('put', '/v1/sandboxes/{id}/files', [204]),
  'files.get': r('get', '/v1/sandboxes/{id}/files', [200, 206]),
  'files.list': r('get', '/v1/sandboxes/{id}/files/list'),
  'files.stat': r('get', '/v1/sandboxes/{id}/files/stat'),
  'files.exists': r('get', '/v1/sandboxes/{id}/files/exists'),
  'files.remove': r('delete', '/v1/sandboxes/{id}/files', [204]),
  'files.mkdir': r('post', '/v1/sandboxes/{id}/files/mkdir', [204]),
  'files.rename': r('post', '/v1/sandboxes/{id}/files/rename', [204]),
  'files.watch': r('get', '/v1/sandboxes/{id}/files/watch'),
  'session.start': r('post', '/v1/sandboxes/{id}/sessions', [201]),
  'session.list': r('get', '/v1/sandboxes/{id}/sessions'),
  'session.input': r('post', '/v1/sandboxes/{id}/sessions/{session}/input', [204]),
  'session.output': r('get', '/v1/sandboxes/{id}/sessions/{session}/output'),
  'session.resize': r('post', '/v1/sandboxes/{id}/sessions/{session}/resize', [204]),
  'session.kill': r('delete', '/v1/sandboxes/{id}/sessions/{session}', [204]),
  'session.attach': r('get', '/v1/sandboxes/{id}/sessions/{session}/attach', [101]),
  'ports.url': r('post', '/v1/sandboxes/{id}/ports/{port}/urls', [201]),
  'ports.revoke_all': r('delete', '/v1/sandboxes/{id}/ports/{port}/urls', [204]),
  'ports.revoke': r('delete', '/v1/sandboxes/{id}/ports/{port}/urls/{url_id}', [204]),
  'ports.proxy': r('get', '/v1/sandboxes/{id}/ports/{port}/{path}'),
  'snapshots.list': r('get', '/v1/snapshots'),
  'snapshots.get': r('get', '/v1/snapshots/{id}'),
  'snapshots.delete': r('delete', '/v1/snapshots/{id}', [204]),
  'snapshots.restore': r('post', '/v1/snapshots/{id}/restore', [201]),
  'snapshots.export': r('get', '/v1/snapshots/{id}/export'),
  'snapshots.import': r('post', '/v1/snapshots/import', [201]),
  'templates.create': r('post', '/v1/templates', [201]),
  'templates.list': r('get', '/v1/templates'),
  'templates.get': r('get', '/v1/templates/{name}'),
  'templates.delete': r('delete', '/v1/templates/{name}', [200, 204]),
  'runs.create': r('post', '/v1/runs', [201]),
  'runs.list': r('get', '/v1/runs'),
  'runs.get': r('get', '/v1/runs/{id}'),
  'runs.step': r('post', '/v1/runs/{id}/steps'),
  'runs.call': r('post', '/v1/runs/{id}/tool-calls', [200, 202]),
  'runs.approve': r('post', '/v1/runs/{id}/approvals/{call}/approve', [200, 202]),
  'runs.reject': r('post', '/v1/runs/{id}/approvals/{call}/reject', [200, 202]),
  'runs.state': r('get', '/v1/runs/{id}/state'),
  'runs.resume': r('post', '/v1/runs/resume'),
} as const;

export type RouteKey = keyof typeof ROUTES;

// Compile-time contract: each route's method is an operation of its path in
// the generated document (openapi-typescript writes `get?: never` for a
// method a path does not have, which makes the entry `never` here).
type Declared<R> = R extends { method: infer M extends Method; path: infer P extends keyof paths }
  ? paths[P][M] extends undefined
    ? never
    : R
  : never;
const declared: { [K in RouteKey]: Declared<(typeof ROUTES)[K]> } = ROUTES;
void declared;
