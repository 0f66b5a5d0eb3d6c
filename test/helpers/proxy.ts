/**
 * A TCP proxy in front of Postgres or Redis that a test can cut and restore, to make a dependency
 * "go away" without touching the shared server other tests use.
 */
import net from 'node:net';

export interface TcpProxy {
  port: number;
  /** Rewrites `url` (postgres:// or redis://) to go through the proxy. */
  via(url: string): string;
  /** Refuses new connections and drops open ones. */
  cut(): Promise<void>;
  /** Accepts connections again on the same port. */
  restore(): Promise<void>;
  close(): Promise<void>;
}

export interface ProxyOptions {
  /** Sees every chunk the target sends, with the number of the connection it belongs to. */
  onTargetData?: (chunk: Buffer, connection: number) => void;
}

export async function startTcpProxy(target: { host: string; port: number }, options: ProxyOptions = {}): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  let server: net.Server | null = null;
  let port = 0;
  let connections = 0;

  const listen = () =>
    new Promise<void>((resolve, reject) => {
      const s = net.createServer((client) => {
        const upstream = net.connect(target.port, target.host);
        sockets.add(client);
        sockets.add(upstream);
        const drop = () => {
          client.destroy();
          upstream.destroy();
          sockets.delete(client);
          sockets.delete(upstream);
        };
        client.on('error', drop).on('close', drop);
        upstream.on('error', drop).on('close', drop);
        const connection = ++connections;
        if (options.onTargetData) upstream.on('data', (chunk: Buffer) => options.onTargetData?.(chunk, connection));
        client.pipe(upstream).pipe(client);
      });
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => {
        const address = s.address();
        if (address && typeof address === 'object') port = address.port;
        server = s;
        resolve();
      });
    });

  const stop = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      sockets.clear();
      if (!server) return resolve();
      server.close(() => resolve());
      server = null;
    });

  await listen();
  return {
    get port() {
      return port;
    },
    via(url: string) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    cut: stop,
    restore: listen,
    close: stop,
  };
}

export function hostPort(url: string, defaultPort: number): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname || '127.0.0.1', port: Number(u.port || defaultPort) };
}

/**
 * Counts the statements Postgres completed through a proxy: its ReadyForQuery messages, less the one
 * that ends each connection's start-up. Each is one transaction when nothing opens one explicitly.
 */
export function createPgStatementCounter(): { tap: NonNullable<ProxyOptions['onTargetData']>; count(): number } {
  const streams = new Map<number, { pending: Buffer; ready: number }>();
  let total = 0;
  return {
    tap(chunk, connection) {
      const stream = streams.get(connection) ?? { pending: Buffer.alloc(0), ready: 0 };
      streams.set(connection, stream);
      let buffer = Buffer.concat([stream.pending, chunk]);
      while (buffer.length >= 5) {
        const length = buffer.readInt32BE(1);
        if (buffer.length < 1 + length) break;
        if (buffer[0] === 0x5a) {
          stream.ready += 1;
          if (stream.ready > 1) total += 1;
        }
        buffer = buffer.subarray(1 + length);
      }
      stream.pending = buffer;
    },
    count: () => total,
  };
}
