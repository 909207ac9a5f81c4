/**
 * A local relay for an exposed port: the SDK's endpoints are `host:port`
 * with the server at `/`, while stasis serves a port under `/p/<token>/` on
 * the daemon. The relay listens on 127.0.0.1 and forwards each request
 * (HTTP, and WebSocket upgrades as raw streams) to the signed URL's prefix.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';

export class PortRelay {
  private server?: http.Server;
  private readonly sockets = new Set<net.Socket>();
  private readonly target: URL;

  /** `signedUrl`: the port's signed URL (`http://daemon/p/<token>/`). */
  constructor(signedUrl: string) {
    this.target = new URL(signedUrl);
    if (this.target.protocol !== 'http:') throw new Error(`the relay speaks http only, not ${this.target.protocol}`);
  }

  private path(inner: string | undefined): string {
    const prefix = this.target.pathname.replace(/\/+$/, '');
    return `${prefix}${inner && inner.startsWith('/') ? inner : `/${inner ?? ''}`}`;
  }

  /** Listen; the local address. */
  async start(): Promise<{ host: string; port: number }> {
    const server = http.createServer((req, res) => {
      const headers = { ...req.headers, host: this.target.host };
      const up = http.request(
        {
          host: this.target.hostname,
          port: this.target.port || 80,
          method: req.method,
          path: this.path(req.url),
          headers,
        },
        (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        },
      );
      up.on('error', (e) => {
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`stasis port relay: ${e.message}`);
      });
      req.pipe(up);
    });
    server.on('upgrade', (req, client, head) => {
      const up = net.connect(Number(this.target.port || 80), this.target.hostname, () => {
        const lines = [`${req.method} ${this.path(req.url)} HTTP/1.1`];
        for (let i = 0; i < req.rawHeaders.length; i += 2) {
          const k = req.rawHeaders[i]!;
          lines.push(`${k}: ${k.toLowerCase() === 'host' ? this.target.host : req.rawHeaders[i + 1]}`);
        }
        up.write(`${lines.join('\r\n')}\r\n\r\n`);
        if (head.length > 0) up.write(head);
        up.pipe(client);
        client.pipe(up);
      });
      const end = () => {
        up.destroy();
        client.destroy();
      };
      up.on('error', end);
      client.on('error', end);
    });
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    // A relay never keeps the process alive: a run interrupted for an
    // approval keeps its session (and relays) while the process ends.
    server.unref();
    this.server = server;
    const addr = server.address() as AddressInfo;
    return { host: '127.0.0.1', port: addr.port };
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
