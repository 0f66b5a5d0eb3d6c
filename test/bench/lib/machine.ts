/**
 * What the benchmark figures were measured on: they mean little without the machine, the server
 * versions and how busy the machine was (other work on a 2-core box moves every figure).
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { Redis } from 'ioredis';
import pg from 'pg';
import { round } from './report.js';

export interface MachineInfo {
  cpuModel: string;
  cores: number;
  totalMemoryMb: number;
  node: string;
  /** `select version()`, or the error text when Postgres could not be reached. */
  postgres: string;
  /** `redis_version` from `INFO server`, or the error text. */
  redis: string;
  os: string;
  /** 1-, 5-, 15-minute load averages when the run started. */
  loadAverage: [number, number, number];
}

export interface MachineOptions {
  databaseUrl: string;
  redisUrl: string;
}

export async function describeMachine(opts: MachineOptions): Promise<MachineInfo> {
  const cpus = os.cpus();
  const [l1, l5, l15] = os.loadavg();
  return {
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    cores: cpus.length,
    totalMemoryMb: Math.round(os.totalmem() / 1024 / 1024),
    node: process.version,
    postgres: await postgresVersion(opts.databaseUrl),
    redis: await redisVersion(opts.redisUrl),
    os: `${osName()} (${os.type()} ${os.release()} ${os.arch()})`,
    loadAverage: [round(l1 ?? 0, 2), round(l5 ?? 0, 2), round(l15 ?? 0, 2)],
  };
}

/** One line per fact, for the printed report. */
export function formatMachine(m: MachineInfo): string[] {
  return [
    `CPU      ${m.cpuModel}, ${m.cores} cores, ${(m.totalMemoryMb / 1024).toFixed(1)} GB RAM`,
    `OS       ${m.os}`,
    `Node     ${m.node}`,
    `Postgres ${m.postgres}`,
    `Redis    ${m.redis}`,
    `load     ${m.loadAverage.join(' ')} (1/5/15 min, at start)`,
  ];
}

async function postgresVersion(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  try {
    await client.connect();
    const { rows } = await client.query<{ version: string }>('select version()');
    return rows[0]?.version ?? 'unknown';
  } catch (error) {
    return `unreachable (${error instanceof Error ? error.message : String(error)})`;
  } finally {
    await client.end().catch(() => {});
  }
}

async function redisVersion(url: string): Promise<string> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, connectTimeout: 5_000, lazyConnect: true });
  redis.on('error', () => {});
  try {
    await redis.connect();
    const info = await redis.info('server');
    const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
    const version = field('redis_version') ?? 'unknown';
    const mode = field('redis_mode');
    return mode ? `${version} (${mode})` : version;
  } catch (error) {
    return `unreachable (${error instanceof Error ? error.message : String(error)})`;
  } finally {
    redis.disconnect();
  }
}

function osName(): string {
  try {
    const text = readFileSync('/etc/os-release', 'utf8');
    const pretty = /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(text)?.[1];
    if (pretty) return pretty;
  } catch {
    // Not Linux, or no os-release: fall back to the kernel name alone.
  }
  return os.type();
}
