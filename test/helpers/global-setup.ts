/**
 * Vitest global setup: uses DATABASE_URL / REDIS_URL when set (CI, this machine), otherwise starts
 * Postgres and Redis with testcontainers (for contributors with Docker). Then migrates one template
 * database per run, which each test file clones (CREATE DATABASE … TEMPLATE is fast).
 */
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

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const containers: Stoppable[] = [];
  let databaseUrl = process.env.DATABASE_URL;
  let redisUrl = process.env.REDIS_URL;
  if (!databaseUrl || !redisUrl) {
    const { GenericContainer, Wait } = await import('testcontainers');
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
  }

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
    const { rows } = await cleanup.query<{ datname: string }>(
      `select datname from pg_database where datname like $1 or datname = $2`,
      [`sm_t_${runId}_%`, templateDatabase],
    );
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
