/**
 * The container health check (`node dist/healthcheck.js`, the image's HEALTHCHECK; `src/healthcheck.ts` only runs this): exit 0 when this
 * container's service answers 200 on /readyz, 1 otherwise, 2 for a bad port setting.
 *
 * It imports nothing of the application, on purpose: Docker runs it every 10 s in every container, and
 * loading the CLI (config, database, queues, HTTP framework) cost about a second of CPU per check
 * (docs/compose.md, "Health checks"). Keep it to node: built-ins; test/integration/healthcheck-entry.test.ts
 * checks its compiled import list.
 */
import http from 'node:http';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** Longer than a busy /readyz, shorter than the compose and Dockerfile `timeout` (10 s). */
const REQUEST_TIMEOUT_MS = 8_000;

export interface HealthResult {
  code: 0 | 1 | 2;
  message: string;
}

/**
 * OPS_PORT when set (the detailed readiness), PORT otherwise, 8080 by default: the same choice as the
 * service's configuration, without loading it.
 */
export function healthPort(env: NodeJS.ProcessEnv): number | string {
  const raw = env.OPS_PORT?.trim() || env.PORT?.trim() || '8080';
  if (!/^\d{1,5}$/.test(raw) || Number(raw) > 65_535) {
    return `${env.OPS_PORT?.trim() ? 'OPS_PORT' : 'PORT'} must be a port number, got "${raw}"`;
  }
  return Number(raw);
}

/**
 * Where that listener answers: its bind address (OPS_HOST with OPS_PORT, HOST otherwise), or loopback
 * when it binds every interface (a wildcard bind answers on loopback).
 */
export function healthHost(env: NodeJS.ProcessEnv): string {
  const bound = (env.OPS_PORT?.trim() ? env.OPS_HOST : env.HOST)?.trim() || '127.0.0.1';
  return ['0.0.0.0', '::', 'localhost'].includes(bound) ? '127.0.0.1' : bound;
}

/** GET http://<host>:<port>/readyz; never throws. */
export function checkReady(port: number, timeoutMs = REQUEST_TIMEOUT_MS, host = '127.0.0.1'): Promise<HealthResult> {
  return new Promise((resolve) => {
    const req = http.get({ host, port, path: '/readyz', timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body = (body + chunk).slice(0, 4_000)));
      res.on('end', () => resolve({ code: res.statusCode === 200 ? 0 : 1, message: `${res.statusCode} ${body}` }));
      res.on('error', (error) => resolve({ code: 1, message: `not answering on port ${port}: ${error.message}` }));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (error) => resolve({ code: 1, message: `not answering on port ${port}: ${error.message}` }));
  });
}

export async function runHealthcheck(env: NodeJS.ProcessEnv): Promise<HealthResult> {
  const port = healthPort(env);
  if (typeof port === 'string') return { code: 2, message: port };
  return checkReady(port, REQUEST_TIMEOUT_MS, healthHost(env));
}

function isEntryPoint(): boolean {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

/** Runs the check as a program: its message on stdout, its code as the exit code. */
export function healthcheckMain(): void {
  void runHealthcheck(process.env).then(({ code, message }) => {
    process.stdout.write(`${message}\n`);
    process.exitCode = code;
  });
}

if (isEntryPoint()) healthcheckMain();
