/**
 * Errors by the daemon's stable codes. Every non-2xx answer is
 * `{"error": {"code", "message", "field"?}}`; the client throws the subclass
 * of {@link StasisError} named after the code (`not_found` -> {@link NotFound}).
 * An unknown code falls back on the HTTP status, so a code added to the
 * server later still throws something meaningful.
 */

export class StasisError extends Error {
  /** The server's stable machine-readable code, e.g. `not_found`. */
  readonly code: string;
  /** HTTP status of the answer (undefined when no answer came). */
  readonly status?: number;
  /** For `invalid_argument` / `invalid_manifest`: the offending field. */
  readonly field?: string;
  constructor(message: string, opts: { code?: string; status?: number; field?: string } = {}) {
    super(message);
    this.name = new.target.name;
    this.code = opts.code ?? (new.target as unknown as { CODE?: string }).CODE ?? 'internal';
    this.status = opts.status;
    this.field = opts.field;
  }
  static readonly CODE: string = 'internal';
  override toString(): string {
    return `${this.code}: ${this.message}${this.field ? ` (field ${this.field})` : ''}`;
  }
}

export class InvalidArgument extends StasisError { static override readonly CODE: string = 'invalid_argument'; }
export class InvalidManifest extends InvalidArgument { static override readonly CODE: string = 'invalid_manifest'; }
export class Unauthorized extends StasisError { static override readonly CODE: string = 'unauthorized'; }
/** Refused: outside the token's scopes, or a signed port URL that expired, was revoked or altered. */
export class Forbidden extends StasisError { static override readonly CODE: string = 'forbidden'; }
/** No such object (another tenant's objects answer this too). */
export class NotFound extends StasisError { static override readonly CODE: string = 'not_found'; }
export class InvalidState extends StasisError { static override readonly CODE: string = 'invalid_state'; }
export class Busy extends InvalidState { static override readonly CODE: string = 'busy'; }
/** The path (or name) is taken: an exclusive write, a mkdir without parents (409). */
export class AlreadyExists extends InvalidState { static override readonly CODE: string = 'already_exists'; }
/** The sandbox or snapshot lives in another region than this daemon's (409). */
export class RegionMismatch extends InvalidState { static override readonly CODE: string = 'region_mismatch'; }
export class PayloadTooLarge extends StasisError { static override readonly CODE: string = 'payload_too_large'; }
export class RateLimited extends StasisError { static override readonly CODE: string = 'rate_limited'; }
/** The sandbox has its limit of requests in flight and a full queue (429 + Retry-After): nothing was done. */
export class Overloaded extends RateLimited { static override readonly CODE: string = 'overloaded'; }
/** The node is draining (503 + Retry-After): it starts no sandbox; nothing was done; retry. */
export class Unavailable extends StasisError { static override readonly CODE: string = 'unavailable'; }
export class Timeout extends StasisError { static override readonly CODE: string = 'timeout'; }
export class IntegrityError extends StasisError { static override readonly CODE: string = 'integrity_error'; }
/** A snapshot this node cannot load (422): nothing was changed. */
export class IncompatibleSnapshot extends StasisError { static override readonly CODE: string = 'incompatible_snapshot'; }
export class Unsupported extends StasisError { static override readonly CODE: string = 'unsupported'; }
/** Nothing listens on the sandbox port asked for (502; the sandbox is unharmed). */
export class PortUnreachable extends StasisError { static override readonly CODE: string = 'port_unreachable'; }
export class BackendError extends StasisError { static override readonly CODE: string = 'backend_error'; }
export class InternalError extends StasisError { static override readonly CODE: string = 'internal'; }
/** The daemon could not be reached at all (not an answer from it). */
export class ConnectionFailed extends StasisError { static override readonly CODE: string = 'connection_failed'; }

type ErrorClass = new (message: string, opts?: { code?: string; status?: number; field?: string }) => StasisError;

/** The error class of each stable code the server answers with. */
export const ERROR_CLASSES: Readonly<Record<string, ErrorClass>> = Object.freeze({
  invalid_argument: InvalidArgument,
  invalid_manifest: InvalidManifest,
  unauthorized: Unauthorized,
  forbidden: Forbidden,
  not_found: NotFound,
  invalid_state: InvalidState,
  busy: Busy,
  already_exists: AlreadyExists,
  region_mismatch: RegionMismatch,
  payload_too_large: PayloadTooLarge,
  rate_limited: RateLimited,
  overloaded: Overloaded,
  unavailable: Unavailable,
  timeout: Timeout,
  integrity_error: IntegrityError,
  incompatible_snapshot: IncompatibleSnapshot,
  unsupported: Unsupported,
  port_unreachable: PortUnreachable,
  backend_error: BackendError,
  internal: InternalError,
});

const BY_STATUS: Readonly<Record<number, ErrorClass>> = {
  400: InvalidArgument,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: InvalidState,
  413: PayloadTooLarge,
  422: IntegrityError,
  429: RateLimited,
  501: Unsupported,
  502: PortUnreachable,
  504: Timeout,
};

/** The error for an answer with status `status` and body `text`. */
export function errorFromResponse(status: number, text: string): StasisError {
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  const detail = (body as { error?: { code?: unknown; message?: unknown; field?: unknown } } | undefined)?.error;
  if (detail && typeof detail.code === 'string') {
    const cls = ERROR_CLASSES[detail.code] ?? BY_STATUS[status] ?? StasisError;
    return new cls(String(detail.message ?? ''), {
      code: detail.code,
      status,
      field: typeof detail.field === 'string' ? detail.field : undefined,
    });
  }
  const cls = BY_STATUS[status] ?? InternalError;
  return new cls(`HTTP ${status}: ${text.slice(0, 500)}`, { status });
}
