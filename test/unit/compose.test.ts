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
  healthcheck?: { test: string[]; timeout?: string; start_period?: string };
  restart?: string;
  env_file?: Array<string | { path: string }>;
  environment?: Record<string, string>;
  volumes?: string[];
  entrypoint?: string[];
}

interface ComposeFile {
  name: string;
  services: Record<string, Service>;
  volumes: Record<string, unknown>;
}

function readCompose(file: string): ComposeFile {
  return parse(readFileSync(path.join(ROOT, file), 'utf8'), { merge: true }) as ComposeFile;
}

const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');

/** Seconds of a compose duration such as 10s, 2m, 1m30s. */
function seconds(duration: string | undefined): number {
  let total = 0;
  for (const [, n, unit] of (duration ?? '').matchAll(/(\d+)(h|m|s)/g))
    total += Number(n) * { h: 3600, m: 60, s: 1 }[unit as 'h' | 'm' | 's'];
  return total;
}

/** The variables an env file sets or shows commented out. */
function variablesOf(file: string): string[] {
  return [...read(file).matchAll(/^#? ?([A-Z][A-Z0-9_]+)=/gm)].map((m) => m[1]!);
}

const TINY_HEALTHCHECK = ['CMD', 'node', 'dist/healthcheck.js'];

/**
 * The Postgres health check: healthy only once the service's role logs in over TCP (the entrypoint's
 * init server listens on the unix socket only) on the container's own address, where the password is
 * checked, with the password from the container's environment (`$$` keeps it from Compose's
 * interpolation).
 */
function expectTcpLoginHealthcheck(pg: Service): void {
  const test = pg.healthcheck?.test ?? [];
  expect(test[0]).toBe('CMD-SHELL');
  // Not 127.0.0.1: the image trusts it without a password.
  expect(test[1]).toMatch(/^PGPASSWORD="\$\$MIRROR_DB_PASSWORD" psql -w -h "\$\$HOSTNAME" -U mirror -d mirror /);
  expect(test.join(' ')).not.toContain('pg_isready');
  expect(seconds(pg.healthcheck?.start_period)).toBeGreaterThanOrEqual(60);
}

// Compose v2 may be missing where unit tests run, so the compose files are checked structurally: they
// must parse and describe the production topology and the demo that docs/compose.md and the README
// promise (test/integration/compose-smoke.test.ts runs them where Docker and Compose are there).
describe('docker-compose.yml', () => {
  const compose = readCompose('docker-compose.yml');

  it('runs Postgres 16+ with a volume and a healthcheck that logs in over TCP as the service role', () => {
    const pg = compose.services.postgres!;
    expect(Number(/postgres:(\d+)/.exec(pg.image ?? '')?.[1])).toBeGreaterThanOrEqual(16);
    expect(pg.volumes?.some((v) => v.endsWith(':/var/lib/postgresql/data'))).toBe(true);
    expectTcpLoginHealthcheck(pg);
  });

  it('runs Redis 7+ with a healthcheck', () => {
    const redis = compose.services.redis!;
    expect(Number(/redis:(\d+)/.exec(redis.image ?? '')?.[1])).toBeGreaterThanOrEqual(7);
    expect(redis.healthcheck?.test.join(' ')).toContain('ping');
  });

  it.each(['worker', 'receiver'])(
    'builds the %s from this repo, after healthy dependencies, with a restart policy and the cheap health check',
    (name) => {
      const service = compose.services[name]!;
      expect(service.build).toBe('.');
      expect(service.depends_on).toEqual({
        postgres: { condition: 'service_healthy' },
        redis: { condition: 'service_healthy' },
      });
      expect(service.restart).toBe('unless-stopped');
      expect(service.environment?.DATABASE_URL).toMatch(/^postgres:\/\/.*@postgres:5432\//);
      expect(service.environment?.REDIS_URL).toBe(
        name === 'receiver'
          ? 'redis://receiver:${RECEIVER_REDIS_PASSWORD:?set RECEIVER_REDIS_PASSWORD in .env}@redis:6379'
          : 'redis://:${REDIS_PASSWORD:?set REDIS_PASSWORD in .env}@redis:6379',
      );
      expect(service.command).toEqual(['start', '--role', name]);
      expect(service.healthcheck?.test).toEqual(TINY_HEALTHCHECK);
      // Room for a loaded host (a check once took 4.45 s) and for the migrations at start.
      expect(seconds(service.healthcheck?.timeout)).toBeGreaterThanOrEqual(10);
      expect(seconds(service.healthcheck?.start_period)).toBeGreaterThanOrEqual(30);
    },
  );

  it('gives each service only its own env files, and .env (the database passwords) to none', () => {
    expect(compose.services.receiver?.env_file).toEqual(['mirror.env', 'receiver.env']);
    expect(compose.services.worker?.env_file).toEqual(['mirror.env', 'worker.env']);
    for (const [name, s] of Object.entries(compose.services)) {
      const files = (s.env_file ?? []).map((f) => (typeof f === 'string' ? f : f.path));
      expect(files, name).not.toContain('.env');
    }
    // Each setting lives in the file of the containers that need it.
    const passwords = [
      'GRAFANA_ADMIN_PASSWORD',
      'MIRROR_DB_PASSWORD',
      'POSTGRES_PASSWORD',
      'RECEIVER_DB_PASSWORD',
      'RECEIVER_REDIS_PASSWORD',
      'REDIS_PASSWORD',
    ];
    expect(variablesOf('.env.example').sort()).toEqual(passwords);
    const worker = variablesOf('worker.env.example');
    const receiver = variablesOf('receiver.env.example');
    const shared = variablesOf('mirror.env.example');
    for (const secret of ['MAILER_API_KEY', 'MAILER_WEBHOOKS_TOKEN', 'ADMIN_TOKEN']) {
      expect(worker).toContain(secret);
      expect([...receiver, ...shared]).not.toContain(secret);
    }
    expect(receiver).toContain('WEBHOOK_SECRETS');
    expect([...worker, ...shared]).not.toContain('WEBHOOK_SECRETS');
    for (const file of ['worker.env.example', 'receiver.env.example', 'mirror.env.example']) {
      for (const password of passwords) expect(variablesOf(file), file).not.toContain(password);
    }
    // The filled-in copies hold secrets: never committed, never sent to the image build.
    for (const ignore of ['.gitignore', '.dockerignore']) {
      const patterns = read(ignore).split('\n');
      expect(patterns, ignore).toContain('.env');
      for (const file of ['mirror.env', 'worker.env', 'receiver.env']) {
        expect(
          patterns.some((p) => p === file || p === `/${file}` || p === '*.env'),
          `${ignore} ${file}`,
        ).toBe(true);
      }
    }
  });

  it('lets workers scale: no fixed host port or container name on the worker', () => {
    const worker = compose.services.worker as Service & { ports?: unknown; container_name?: unknown };
    expect(worker.ports).toBeUndefined();
    expect(worker.container_name).toBeUndefined();
  });

  it('has no demo in it (the demo has its own file and project)', () => {
    expect(compose.name).toBe('subscriber-mirror');
    expect(Object.keys(compose.services)).not.toContain('demo');
    expect(Object.keys(compose.services)).not.toContain('simulator');
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
    expect(compose.services.worker?.environment?.DATABASE_URL?.startsWith('postgres://mirror:${MIRROR_DB_PASSWORD:?')).toBe(true);
    for (const name of ['receiver', 'worker']) expect(compose.services[name]?.environment?.POSTGRES_PASSWORD, name).toBeUndefined();
  });

  // The receiver is the one container on the internet: whoever takes it over gets its environment
  // and its database role (test/integration/db-receiver-role.test.ts tries that role).
  it('gives the receiver its own database role and no credential beyond it', () => {
    const receiver = compose.services.receiver!;
    expect(receiver.environment?.DATABASE_URL).toBe(
      'postgres://subscriber_mirror_receiver:${RECEIVER_DB_PASSWORD:?set RECEIVER_DB_PASSWORD in .env}@postgres:5432/mirror',
    );
    expect(compose.services.postgres?.environment?.RECEIVER_DB_PASSWORD).toMatch(/^\$\{RECEIVER_DB_PASSWORD:\?[^}]+\}$/);
    expect(read('deploy/postgres/init-roles.sh')).toMatch(/CREATE ROLE subscriber_mirror_receiver LOGIN NOSUPERUSER .*PASSWORD :'rpw'/);
    const environment = Object.keys(receiver.environment ?? {});
    const files = ['mirror.env.example', 'receiver.env.example'].flatMap(variablesOf);
    for (const secret of ['MAILER_API_KEY', 'MAILER_WEBHOOKS_TOKEN', 'ADMIN_TOKEN', 'MIRROR_DB_PASSWORD', 'POSTGRES_PASSWORD']) {
      expect([...environment, ...files], secret).not.toContain(secret);
    }
    expect(JSON.stringify(receiver.environment)).not.toContain('MIRROR_DB_PASSWORD');
  });

  it('has Redis require a password from .env, given to the services in REDIS_URL and to redis-cli', () => {
    const redis = compose.services.redis!;
    expect(redis.environment?.REDISCLI_AUTH).toMatch(/^\$\{REDIS_PASSWORD:\?[^}]+\}$/);
    expect(redis.environment?.RECEIVER_REDIS_PASSWORD).toMatch(/^\$\{RECEIVER_REDIS_PASSWORD:\?[^}]+\}$/);
    // The start script sets both passwords from the environment, on redis-server's stdin: not on
    // the command line, which `ps` shows.
    expect(redis.command).toEqual(['sh', '/etc/redis/start.sh']);
    expect(redis.volumes).toEqual(
      expect.arrayContaining(['./deploy/redis/start.sh:/etc/redis/start.sh:ro', './deploy/redis/receiver.acl:/etc/redis/receiver.acl:ro']),
    );
    const start = read('deploy/redis/start.sh');
    expect(start).toMatch(/requirepass "%s".*user receiver on >%s %s/);
    expect(start).toMatch(/\| *\n? *exec redis-server - /);
    expect(JSON.stringify(redis.command)).not.toContain('PASSWORD');
  });

  // The receiver's Redis user may only queue deliveries: tried with its own rules in
  // test/integration/redis-receiver-acl.test.ts.
  it('gives the receiver its own Redis user and not the shared Redis password', () => {
    const receiver = compose.services.receiver!;
    expect(JSON.stringify(receiver.environment)).not.toContain('${REDIS_PASSWORD');
    expect(read('deploy/redis/receiver.acl')).toMatch(/^resetkeys resetchannels %RW~\{prefix\}:events:\*$/m);
  });

  it('gives Grafana an admin password from .env (not admin/admin)', () => {
    expect(compose.services.grafana?.environment?.GF_SECURITY_ADMIN_PASSWORD).toMatch(/^\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}$/);
  });

  it('runs every production container with an init and pinned image tags', () => {
    for (const [name, s] of production()) {
      expect(s.init, name).toBe(true);
      if (s.image && !s.build) expect(s.image, name).toMatch(/:\d+\.\d+\.?\d*-[a-z]/);
    }
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^ARG NODE_VERSION=\d+\.\d+\.\d+$/m);
    expect(dockerfile.match(/^FROM .*$/gm)?.every((line) => line.includes('node:${NODE_VERSION}-bookworm-slim'))).toBe(true);
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

describe('Dockerfile', () => {
  const dockerfile = read('Dockerfile');
  const stages = dockerfile.split(/^(?=FROM )/m).slice(1);
  const runtime = stages.at(-1) ?? '';

  it('builds with only its base image present: no syntax= line (no frontend image to fetch)', () => {
    expect(dockerfile).not.toMatch(/^#\s*syntax\s*=/im);
  });

  it('checks health with the entry point that loads nothing of the application', () => {
    expect(runtime).toMatch(/^HEALTHCHECK .*--timeout=(\d+)s.* CMD \["node", "dist\/healthcheck\.js"\]$/m);
    expect(Number(/--timeout=(\d+)s/.exec(runtime)?.[1])).toBeGreaterThanOrEqual(10);
  });

  it('gives the runtime stage production dependencies only, and no compiler', () => {
    const from = /^COPY --from=(\w+) \/app\/node_modules/m.exec(runtime)?.[1];
    const deps = stages.find((stage) => new RegExp(`^FROM \\S+ AS ${from}$`, 'm').test(stage)) ?? '';
    expect(deps).toMatch(/npm ci --omit=dev/);
    expect(deps).toMatch(/rm -rf node_modules\/typescript/);
    expect(runtime).not.toMatch(/^RUN npm/m);
    expect(runtime).not.toMatch(/COPY (--from=\w+ )?\S*src/);
  });
});

describe('docker-compose.demo.yml', () => {
  const demo = readCompose('docker-compose.demo.yml');
  const production = readCompose('docker-compose.yml');

  it('is its own project with its own service and volume names, so it shares nothing with production', () => {
    expect(demo.name).toBe('subscriber-mirror-demo');
    expect(demo.name).not.toBe(production.name);
    // Even under one COMPOSE_PROJECT_NAME no container or volume would be shared.
    const prodServices = Object.keys(production.services);
    expect(Object.keys(demo.services).filter((s) => prodServices.includes(s))).toEqual([]);
    const prodVolumes = Object.keys(production.volumes);
    expect(Object.keys(demo.volumes).filter((v) => prodVolumes.includes(v))).toEqual([]);
    for (const s of Object.values(demo.services)) {
      for (const v of s.volumes ?? []) {
        const source = v.split(':')[0]!;
        if (!source.startsWith('./')) expect(Object.keys(demo.volumes)).toContain(source);
      }
    }
  });

  it('publishes one port, on 127.0.0.1 only, not the production port', () => {
    const published = Object.values(demo.services).flatMap((s) => s.ports ?? []);
    expect(published).toEqual(['127.0.0.1:${DEMO_PORT:-8088}:8080']);
  });

  it('reads no env file into any container, and the simulator gets no settings at all', () => {
    for (const [name, s] of Object.entries(demo.services)) expect(s.env_file, name).toBeUndefined();
    expect(demo.services.simulator?.environment).toBeUndefined();
    expect(demo.services.simulator?.command).toContain('--churn');
    // Compose still reads .env to fill in ${...}: the demo takes nothing from it but DEMO_PORT.
    const variables = [...read('docker-compose.demo.yml').matchAll(/(?<!\$)\$\{(\w+)/g)].map((m) => m[1]);
    expect([...new Set(variables)]).toEqual(['DEMO_PORT']);
  });

  it('runs the service against the simulator with a generated admin token, never one written down', () => {
    const service = demo.services.demo!;
    expect(service.environment?.MAILER_LEGACY_URL).toBe('http://simulator:4010');
    expect(service.environment?.DATABASE_URL).toMatch(/@demo-postgres:5432\/mirror$/);
    expect(service.environment?.REDIS_URL).toBe('redis://demo-redis:6379');
    expect(service.environment?.ADMIN_TOKEN).toBeUndefined();
    expect(service.depends_on?.simulator).toEqual({ condition: 'service_healthy' });
    expect(service.entrypoint).toEqual(['sh', '/demo/start.sh']);
    expect(service.volumes).toContain('./deploy/demo/start.sh:/demo/start.sh:ro');
    const start = read('deploy/demo/start.sh');
    expect(start).toMatch(/randomBytes\(18\)/);
    expect(start).toMatch(
      /migrate\n.*webhooks register --url "\$DEMO_WEBHOOK_URL"[^\n]*\n[\s\S]*admin token \$\{ADMIN_TOKEN\}[\s\S]*exec node .*start --role all/,
    );
  });

  it('uses the production images and health checks', () => {
    expectTcpLoginHealthcheck(demo.services['demo-postgres']!);
    expect(demo.services['demo-postgres']?.image).toBe(production.services.postgres?.image);
    expect(demo.services['demo-redis']?.image).toBe(production.services.redis?.image);
    expect(demo.services.demo?.healthcheck?.test).toEqual(TINY_HEALTHCHECK);
    expect(demo.services.demo?.image).toBe(production.services.worker?.image);
  });
});
