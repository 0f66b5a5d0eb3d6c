/**
 * Sends one corpus case with node:http, so the test controls every header and byte (fetch would add
 * a content type, refuse some methods with a body, and join or normalise headers).
 */
import http from 'node:http';
import type { ReceiverCase } from './receiver-corpus.js';

export interface Answer {
  status: number;
  body: string;
  /** Set when no HTTP answer came (connection closed or refused). */
  error?: string;
}

export function sendCase(port: number, c: ReceiverCase, timeoutMs = 15_000): Promise<Answer> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (answer: Answer) => {
      if (settled) return;
      settled = true;
      resolve(answer);
    };
    const withBody = c.method !== 'GET' && c.method !== 'HEAD';
    const headers: Record<string, string> = { ...c.headers };
    if (withBody && !c.chunked) headers['content-length'] = String(c.body.length);
    if (withBody && c.chunked) headers['transfer-encoding'] = 'chunked';
    const req = http.request({ host: '127.0.0.1', port, path: c.path, method: c.method, headers, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => done({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', (error) => done({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), error: error.message }));
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    // A server may answer (413) and close before the whole body is written; the answer still counts.
    req.on('error', (error) => setTimeout(() => done({ status: 0, body: '', error: error.message }), 50));
    if (!withBody) {
      req.end();
    } else if (c.chunked) {
      for (let i = 0; i < c.body.length; i += 16 * 1024) req.write(c.body.subarray(i, i + 16 * 1024));
      req.end();
    } else {
      req.end(c.body);
    }
  });
}
