import { execFileSync } from 'node:child_process';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, createScrubber, REDACTED, usePretty } from '../../src/ground/log.js';

function capture() {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      callback();
    },
  });
  return { lines, destination };
}

describe('logger redaction', () => {
  const apiKey = 'live-api-key-9f8e7d';
  const token = 'bearer-token-123456';
  const secret = 'whsec-abcdef123456';

  it('redacts secret fields, secret values inside strings and errors, and URL passwords', () => {
    const { lines, destination } = capture();
    const { logger } = createLogger({ secrets: [apiKey, token, secret], destination, level: 'debug' });
    logger.info({ apiKey, headers: { authorization: `Bearer ${token}`, signature: 'abc123', 'x-service-apikey': apiKey } }, 'request');
    logger.info({ webhook: { id: '1', secret } }, 'registered');
    logger.warn(`upstream said: key ${apiKey} is invalid`);
    logger.error({ err: new Error(`failed with token ${token}`) }, 'boom');
    logger.info({ url: 'postgres://mirror:hunter2pass@db:5432/x' }, 'connecting');
    logger.info({ nested: { deeper: { note: `secret is ${secret}` } } }, 'nested');

    const output = lines.join('\n');
    for (const value of [apiKey, token, secret, 'hunter2pass', 'abc123']) {
      expect(output).not.toContain(value);
    }
    expect(output).toContain(REDACTED);
    expect(lines).toHaveLength(6);
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(parsed[2]?.msg).toBe(`upstream said: key ${REDACTED} is invalid`);
    expect(JSON.stringify(parsed[3])).toContain('failed with token');
    expect(parsed[4]?.url).toBe(`postgres://mirror:${REDACTED}@db:5432/x`);
  });

  it('scrubs every secret it is given, however short, and a secret inside a longer one whole', () => {
    const scrub = createScrubber(['abc', 'xyz-abc-xyz']);
    expect(scrub('key abc and xyz-abc-xyz')).toBe(`key ${REDACTED} and ${REDACTED}`);
  });

  it('scrubs secrets added after creation', () => {
    const scrub = createScrubber();
    scrub.add('later-secret');
    expect(scrub('a later-secret b later-secret')).toBe(`a ${REDACTED} b ${REDACTED}`);
  });
});

describe('log format', () => {
  it('is human-readable only for a person at a terminal, JSON in production and when piped', () => {
    expect(usePretty('auto', true, undefined)).toBe(true);
    expect(usePretty('auto', true, 'development')).toBe(true);
    expect(usePretty('auto', true, 'production')).toBe(false);
    expect(usePretty('auto', false, undefined)).toBe(false);
    expect(usePretty(undefined, false, undefined)).toBe(false);
    expect(usePretty('json', true, undefined)).toBe(false);
    expect(usePretty('pretty', false, 'production')).toBe(true);
  });
});

describe('log output of a real process', () => {
  const fixture = 'test/fixtures/log/one-line.ts';
  const env = { PATH: process.env.PATH, HOME: process.env.HOME };

  it('prints JSON when stdout is a pipe', () => {
    const out = execFileSync(process.execPath, ['--import', 'tsx', fixture], { env, encoding: 'utf8' });
    expect(JSON.parse(out.trim())).toMatchObject({ level: 'warn', groupId: '42', msg: `something to see ${REDACTED}` });
  });

  it('prints a readable line (pino-pretty) on a terminal, secrets still redacted', () => {
    // util-linux `script` gives the child a pseudo-terminal.
    const command = `${process.execPath} --import tsx ${fixture}`;
    const out = execFileSync('script', ['-qec', command, '/dev/null'], { env, encoding: 'utf8' });
    const plain = out.replace(/\u001b\[[0-9;]*m/g, '');
    expect(plain).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] WARN: something to see \[redacted\]/m);
    expect(plain).toContain('groupId: "42"');
    expect(plain).not.toContain('{"level"');
    expect(plain).not.toContain('fixture-secret-value');
  });
});
