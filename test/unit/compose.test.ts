import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ROOT } from '../helpers/cli.js';

interface Service {
  image?: string;
  init?: boolean;
  ports?: string[];
  profiles?: string[];
  build?: unknown;
  command?: string[];
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
  restart?: string;
  env_file?: Array<{ path: string }>;
  environment?: Record<string, string>;
  volumes?: string[];
}

// No Docker engine runs here, so the compose file is checked structurally: it must parse and
// describe the production topology docs/operations.md and docs/security.md promise.
describe('docker-compose.yml', () => {
  const compose = parse(readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
    services: Record<string, Service>;
    volumes: Record<string, unknown>;
  };

  it('runs Postgres 16+ with a volume and a healthcheck', () => {
    const pg = compose.services.postgres!;
    expect(Number(/postgres:(\d+)/.exec(pg.image ?? '')?.[1])).toBeGreaterThanOrEqual(16);
    expect(pg.volumes?.some((v) => v.endsWith(':/var/lib/postgresql/data'))).toBe(true);
    expect(pg.healthcheck?.test.join(' ')).toContain('pg_isready');
  });

  it('runs Redis 7+ with a healthcheck', () => {
    const redis = compose.services.redis!;
    expect(Number(/redis:(\d+)/.exec(redis.image ?? '')?.[1])).toBeGreaterThanOrEqual(7);
    expect(redis.healthcheck?.test.join(' ')).toContain('ping');
  });

  it.each(['worker', 'receiver'])('builds the %s from this repo, after healthy dependencies, with a restart policy and .env', (name) => {
    const service = compose.services[name]!;
    expect(service.build).toBe('.');
    expect(service.depends_on).toEqual({
      postgres: { condition: 'service_healthy' },
      redis: { condition: 'service_healthy' },
    });
    expect(service.restart).toBe('unless-stopped');
    expect(service.env_file?.[0]?.path).toBe('.env');
    expect(service.environment?.DATABASE_URL).toMatch(/^postgres:\/\/.*@postgres:5432\//);
    expect(service.environment?.REDIS_URL).toBe('redis://redis:6379');
    expect(service.command).toEqual(['start', '--role', name]);
    expect(service.healthcheck?.test).toEqual(['CMD', 'node', 'dist/cli.js', 'healthcheck']);
  });

  it('lets workers scale: no fixed host port or container name on the worker', () => {
    const worker = compose.services.worker as Service & { ports?: unknown; container_name?: unknown };
    expect(worker.ports).toBeUndefined();
    expect(worker.container_name).toBeUndefined();
  });

  it('has a demo profile: simulator with churn and a service preconfigured against it', () => {
    const sim = compose.services.simulator as Service & { profiles?: string[] };
    const demo = compose.services.demo as Service & { profiles?: string[]; command?: string[] };
    expect(sim.profiles).toEqual(['demo']);
    expect(sim.command).toContain('--churn');
    expect(demo.profiles).toEqual(['demo']);
    expect(demo.environment?.MAILER_LEGACY_URL).toBe('http://simulator:4010');
    expect(demo.depends_on?.simulator).toEqual({ condition: 'service_healthy' });
    expect(demo.command?.join(' ')).toMatch(/migrate && .*webhooks register --url http:\/\/demo:8080\/webhooks.*start --role all/);
  });

  const production = () => Object.entries(compose.services).filter(([, s]) => !s.profiles);

  it('publishes only the webhook port on the production path', () => {
    const published = production().flatMap(([name, s]) => (s.ports ?? []).map((p) => `${name} ${p}`));
    expect(published).toEqual(['receiver 8080:8080']);
    // The internal endpoints are on OPS_PORT, which differs from the published port.
    expect(compose.services.receiver?.environment?.OPS_PORT).toBe('9090');
    expect(compose.services.worker?.environment?.OPS_PORT).toBe('9090');
  });

  it('takes the database passwords from .env, required, with no default and no superuser for the service', () => {
    const raw = readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8');
    expect(raw).not.toMatch(/mirror:mirror/);
    const pg = compose.services.postgres!;
    expect(pg.environment?.POSTGRES_PASSWORD).toMatch(/^\$\{POSTGRES_PASSWORD:\?[^}]+\}$/);
    expect(pg.environment?.MIRROR_DB_PASSWORD).toMatch(/^\$\{MIRROR_DB_PASSWORD:\?[^}]+\}$/);
    expect(pg.volumes).toContain('./deploy/postgres/init-roles.sh:/docker-entrypoint-initdb.d/10-roles.sh:ro');
    const init = readFileSync(path.join(ROOT, 'deploy/postgres/init-roles.sh'), 'utf8');
    expect(init).toMatch(/CREATE ROLE mirror LOGIN NOSUPERUSER/);
    expect(init).toMatch(/CREATE DATABASE mirror OWNER mirror/);
    for (const name of ['receiver', 'worker']) {
      const url = compose.services[name]?.environment?.DATABASE_URL ?? '';
      expect(url.startsWith('postgres://mirror:${MIRROR_DB_PASSWORD:?'), name).toBe(true);
      expect(compose.services[name]?.environment?.POSTGRES_PASSWORD, name).toBe('');
    }
  });

  it('runs every production container with an init and pinned image tags', () => {
    for (const [name, s] of production()) {
      expect(s.init, name).toBe(true);
      if (s.image && !s.build) expect(s.image, name).toMatch(/:\d+\.\d+\.?\d*-[a-z]/);
    }
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^ARG NODE_VERSION=\d+\.\d+\.\d+$/m);
    expect(dockerfile.match(/^FROM .*$/gm)?.every((line) => line.includes('node:${NODE_VERSION}-bookworm-slim'))).toBe(true);
    expect(dockerfile).toMatch(/^HEALTHCHECK .*CMD \["node", "dist\/cli\.js", "healthcheck"\]$/m);
  });

  it('declares the volumes it uses', () => {
    expect(Object.keys(compose.volumes).sort()).toEqual(['grafanadata', 'pgdata', 'promdata', 'redisdata']);
  });

  it('has a Dockerfile whose entrypoint is the CLI', () => {
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/ENTRYPOINT \["node", "--enable-source-maps", "dist\/cli\.js"\]/);
    expect(dockerfile).toMatch(/COPY drizzle \.\/drizzle/);
  });
});
