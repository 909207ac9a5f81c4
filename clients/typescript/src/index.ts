export { StasisClient, Snapshots, Templates } from './client.js';
export { Http, DEFAULT_URL, resolveToken, type ConnectionOptions, type RequestOptions } from './http.js';
export {
  Sandbox,
  Files,
  Sessions,
  Session,
  Ports,
  ExecResult,
  argvOf,
  type Command,
  type AttachEnd,
  type AttachOptions,
  type Attachment,
  type CreateSandboxOptions,
  type ListOptions,
  type ExecEvent,
  type ExecOptions,
  type SessionStartOptions,
} from './sandbox.js';
export { Runs, Run, type ToolCallOptions } from './runs.js';
export { ROUTES, type RouteKey } from './routes.js';
export * from './errors.js';
export type * from './types.js';
