/**
 * Vitest global setup: finds Postgres and Redis the way the service does (DATABASE_URL / REDIS_URL,
 * else the service's defaults 127.0.0.1:5432 and 127.0.0.1:6379 when they answer), else starts them
 * with testcontainers when a container runtime is there, else stops with one line saying what to
 * start or set. Then migrates one template database per run, which each test file clones
 * (CREATE DATABASE … TEMPLATE is fast).
 */
import net from 'node:net';
import type { TestProject } from 'vitest/node';
import pg from 'pg';
import { runMigrations } from '../../src/db/migrate.js';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
    redisUrl: string;
    templateDatabase: string;
    runId: string;
  }
}

interface Stoppable {
  stop(): Promise<unknown>;
}

/** The service's own defaults (src/config.ts). */
export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/postgres';
export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

/** True when something accepts TCP connections on host:port within `timeoutMs`. */
export function answers(host: string, port: number, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export interface ServiceChoice {
  databaseUrl?: string;
  redisUrl?: string;
}

/** Env first, then the local defaults that answer; what is still missing needs containers. */
export async function localServices(env: NodeJS.ProcessEnv, probe = answers): Promise<ServiceChoice> {
  const choice: ServiceChoice = {};
  const db = env.DATABASE_URL || ((await probe('127.0.0.1', 5432)) ? DEFAULT_DATABASE_URL : undefined);
  const redis = env.REDIS_URL || ((await probe('127.0.0.1', 6379)) ? DEFAULT_REDIS_URL : undefined);
  if (db) choice.databaseUrl = db;
  if (redis) choice.redisUrl = redis;
  return choice;
}

/** The one line printed when neither local services nor a container runtime are there. */
export function missingServicesMessage(choice: ServiceChoice): string {
  const missing = [
    ...(choice.databaseUrl ? [] : ['Postgres on 127.0.0.1:5432 (or set DATABASE_URL)']),
    ...(choice.redisUrl ? [] : ['Redis on 127.0.0.1:6379 (or set REDIS_URL)']),
  ];
  return `tests need Postgres and Redis and found no container runtime for testcontainers: start ${missing.join(' and ')}, or start Docker.`;
}

async function startContainers(choice: ServiceChoice, containers: Stoppable[]): Promise<{ databaseUrl: string; redisUrl: string }> {
  const { GenericContainer, Wait, getContainerRuntimeClient } = await import('testcontainers');
  try {
    await getContainerRuntimeClient();
  } catch {
    process.stderr.write(`${missingServicesMessage(choice)}\n`);
    process.exit(2);
  }
  let { databaseUrl, redisUrl } = choice;
  if (!databaseUrl) {
    const container = await new GenericContainer('postgres:16-alpine')
      .withEnvironment({ POSTGRES_HOST_AUTH_METHOD: 'trust' })
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
      .start();
    containers.push(container);
    databaseUrl = `postgres://postgres@${container.getHost()}:${container.getMappedPort(5432)}/postgres`;
  }
  if (!redisUrl) {
    const container = await new GenericContainer('redis:7-alpine').withExposedPorts(6379).start();
    containers.push(container);
    redisUrl = `redis://${container.getHost()}:${container.getMappedPort(6379)}`;
  }
  return { databaseUrl, redisUrl };
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const containers: Stoppable[] = [];
  const choice = await localServices(process.env);
  const { databaseUrl, redisUrl } =
    choice.databaseUrl && choice.redisUrl
      ? { databaseUrl: choice.databaseUrl, redisUrl: choice.redisUrl }
      : await startContainers(choice, containers);

  const runId = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  const templateDatabase = `sm_tpl_${runId}`;
  const admin = new pg.Client({ connectionString: databaseUrl });
  await admin.connect();
  await admin.query(`create database ${templateDatabase}`);
  await admin.end();
  await runMigrations(withDatabase(databaseUrl, templateDatabase));

  project.provide('databaseUrl', databaseUrl);
  project.provide('redisUrl', redisUrl);
  project.provide('templateDatabase', templateDatabase);
  project.provide('runId', runId);

  return async () => {
    const cleanup = new pg.Client({ connectionString: databaseUrl });
    await cleanup.connect();
    // Drop every database this run created (template and per-file clones left by crashed files).
    const { rows } = await cleanup.query<{ datname: string }>(`select datname from pg_database where datname like $1 or datname = $2`, [
      `sm_t_${runId}_%`,
      templateDatabase,
    ]);
    for (const { datname } of rows) {
      await cleanup.query(`drop database if exists "${datname}" with (force)`);
    }
    await cleanup.end();
    await Promise.all(containers.map((c) => c.stop()));
  };
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}
