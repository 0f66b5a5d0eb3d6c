/**
 * Hostile clients for the public-surface scenarios, run in their own process (`node --import tsx
 * attackers.ts '<json>'`) so their CPU is not the test's and the test can time real deliveries.
 * Prints one JSON summary on stdout when done.
 *
 * - `drip`: `connections` sockets announce `announcedBytes` and send `chunkBytes` every `everyMs`
 *   until the server ends them; each records how it ended (the status line it got, if any).
 * - `flood`: `connections` keep-alive sockets send forged-signature POSTs of `bodyBytes` back to back
 *   for `durationMs`, as fast as the server answers.
 */
import net from 'node:net';

interface DripConfig {
  mode: 'drip';
  port: number;
  path: string;
  connections: number;
  announcedBytes: number;
  chunkBytes: number;
  everyMs: number;
  /** Give up (and report the socket as still open) after this long. */
  maxMs: number;
}

interface FloodConfig {
  mode: 'flood';
  port: number;
  path: string;
  connections: number;
  bodyBytes: number;
  durationMs: number;
}

type Config = DripConfig | FloodConfig;

function drip(config: DripConfig): Promise<object> {
  const started = Date.now();
  const endings: Array<{ status: string; openMs: number }> = [];
  let stillOpen = 0;
  const one = () =>
    new Promise<void>((resolve) => {
      const socket = net.connect(config.port, '127.0.0.1');
      let response = '';
      let timer: NodeJS.Timeout | undefined;
      const opened = Date.now();
      const giveUp = setTimeout(() => {
        stillOpen += 1;
        socket.destroy();
      }, config.maxMs);
      socket.on('connect', () => {
        socket.write(
          `POST ${config.path} HTTP/1.1\r\nhost: attacker\r\ncontent-type: application/json\r\n` +
            `content-length: ${config.announcedBytes}\r\nsignature: ${'ab'.repeat(32)}\r\n\r\n{`,
        );
        const chunk = Buffer.alloc(config.chunkBytes, 0x20);
        timer = setInterval(() => socket.write(chunk), config.everyMs);
      });
      socket.on('data', (d: Buffer) => (response += d.toString('latin1')));
      socket.on('error', () => {});
      socket.on('close', () => {
        clearInterval(timer);
        clearTimeout(giveUp);
        const status = /^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 'none';
        endings.push({ status, openMs: Date.now() - opened });
        resolve();
      });
    });
  return Promise.all(Array.from({ length: config.connections }, one)).then(() => {
    const byStatus: Record<string, number> = {};
    for (const e of endings) byStatus[e.status] = (byStatus[e.status] ?? 0) + 1;
    const open = endings.map((e) => e.openMs).sort((a, b) => a - b);
    return { byStatus, stillOpen, minOpenMs: open[0] ?? 0, maxOpenMs: open[open.length - 1] ?? 0, totalMs: Date.now() - started };
  });
}

function flood(config: FloodConfig): Promise<object> {
  const body = Buffer.alloc(config.bodyBytes, 0x20);
  body[0] = 0x7b;
  body[body.length - 1] = 0x7d;
  const head = Buffer.from(
    `POST ${config.path} HTTP/1.1\r\nhost: attacker\r\ncontent-type: application/json\r\n` +
      `content-length: ${body.length}\r\nsignature: ${'cd'.repeat(32)}\r\n\r\n`,
  );
  const deadline = Date.now() + config.durationMs;
  const byStatus: Record<string, number> = {};
  const one = () =>
    new Promise<void>((resolve) => {
      const connect = () => {
        if (Date.now() >= deadline) return resolve();
        const socket = net.connect(config.port, '127.0.0.1');
        let buffered = '';
        const send = () => {
          if (Date.now() >= deadline) {
            socket.destroy();
            return;
          }
          socket.write(head);
          socket.write(body);
        };
        socket.on('connect', send);
        socket.on('data', (d: Buffer) => {
          buffered += d.toString('latin1');
          // One answer per request: the status line, headers, then a content-length body.
          for (;;) {
            const end = buffered.indexOf('\r\n\r\n');
            if (end < 0) return;
            const length = Number(/content-length: (\d+)/i.exec(buffered.slice(0, end))?.[1] ?? 0);
            if (buffered.length < end + 4 + length) return;
            const status = /^HTTP\/1\.1 (\d{3})/.exec(buffered)?.[1] ?? 'garbled';
            byStatus[status] = (byStatus[status] ?? 0) + 1;
            buffered = buffered.slice(end + 4 + length);
            send();
          }
        });
        socket.on('error', () => {});
        socket.on('close', () => setImmediate(connect));
      };
      connect();
    });
  return Promise.all(Array.from({ length: config.connections }, one)).then(() => ({
    byStatus,
    requests: Object.values(byStatus).reduce((a, b) => a + b, 0),
  }));
}

const config = JSON.parse(process.argv[2] ?? '{}') as Config;
const run = config.mode === 'drip' ? drip(config) : flood(config);
run.then(
  (summary) => {
    process.stdout.write(`${JSON.stringify(summary)}\n`);
    process.exit(0);
  },
  (error: unknown) => {
    process.stderr.write(`${String(error)}\n`);
    process.exit(1);
  },
);
