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

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  let server: net.Server | null = null;
  let port = 0;

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
