import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { PER_ACCOUNT_SETTINGS, SETTINGS } from '../../src/config.js';
import { settingsOf } from '../../src/ground/settings.js';
import { imageMemoryEnv, PRODUCTION_ENV } from '../bench/lib/service-run.js';
import { ROOT } from '../helpers/cli.js';

interface Service {
  image?: string;
  user?: string;
  read_only?: boolean;
  tmpfs?: string[];
  cap_drop?: string[];
  cap_add?: string[];
  security_opt?: string[];
  sysctls?: Record<string, number | string>;
  mem_limit?: string;
  memswap_limit?: string;
  init?: boolean;
  ports?: string[];
  profiles?: string[];
  build?: unknown;
  command?: string[];
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[]; timeout?: string; start_period?: string };
  restart?: string;
  env_file?: Array<string | { path: string; required?: boolean }>;
  environment?: Record<string, string> | string[];
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

const MiB = 1024 * 1024;

/** The image's node flags: its one `ENV NODE_OPTIONS=…` (Dockerfile, runtime stage). */
const IMAGE_NODE_OPTIONS = (PRODUCTION_ENV.NODE_OPTIONS ?? '').split(' ').filter((f) => f !== '');
/** The image's heap cap, bytes (`--max-old-space-size`, MB). */
const HEAP_CAP =
  Number(/^--max-old-space-size=(\d+)$/.exec(IMAGE_NODE_OPTIONS.find((f) => f.startsWith('--max-old-space-size=')) ?? '')?.[1]) * MiB;
/**
 * What a service process holds besides its old space, bytes: the young generation (3 semi-spaces of
 * --max-semi-space-size) and ~110 MB measured outside the V8 heap (the node binary's pages, code,
 * buffers, sockets; docs/benchmarks.md, "memory"), rounded up.
 */
const NOT_OLD_SPACE =
  3 *
    Number(/^--max-semi-space-size=(\d+)$/.exec(IMAGE_NODE_OPTIONS.find((f) => f.startsWith('--max-semi-space-size=')) ?? '')?.[1] ?? 64) *
    MiB +
  128 * MiB;

/** Bytes of a compose size (`448m`, `1g`, `512k`, `1024`). */
function bytesOf(size: string): number {
  const match = /^(\d+)([bkmg]?)$/i.exec(size);
  if (!match) throw new Error(`not a compose size: ${size}`);
  return Number(match[1]) * { '': 1, b: 1, k: 1024, m: MiB, g: 1024 * MiB }[match[2]!.toLowerCase() as '' | 'b' | 'k' | 'm' | 'g'];
}

/** A service's memory limit: the variable that sets it (if any) and its default, in bytes. */
function memoryLimitOf(service: Service): { variable: string | undefined; bytes: number } {
  const value = service.mem_limit ?? '';
  const variable = /^\$\{(\w+):-([^}]+)\}$/.exec(value);
  return { variable: variable?.[1], bytes: bytesOf(variable?.[2] ?? value) };
}

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

/** The variable names a service's `environment:` passes (list form: bare names and NAME=value). */
function environmentNames(service: Service | undefined): string[] {
  const env = service?.environment ?? {};
  return Array.isArray(env) ? env.map((entry) => entry.split('=')[0]!) : Object.keys(env);
}

/** Every variable a setting is read from (aliases too), and the passwords only Compose uses. */
const SETTING_NAMES = settingsOf(SETTINGS).flatMap((s) => [...s.names]);
const COMPOSE_PASSWORDS = ['POSTGRES_PASSWORD', 'MIRROR_DB_PASSWORD', 'RECEIVER_DB_PASSWORD', 'REDIS_PASSWORD', 'GRAFANA_ADMIN_PASSWORD'];
const RECEIVER_NEVER = [
  // No Redis credential at all (issue 37): the receiver only adds to the inbox.
  'REDIS_URL',
  'RECEIVER_REDIS_PASSWORD',
  'MAILER_API_KEY',
  'MAILER_API_TOKEN',
  'MAILER_WEBHOOKS_TOKEN',
  'ADMIN_TOKEN',
  'MIRROR_DB_PASSWORD',
  'REDIS_PASSWORD',
  'POSTGRES_PASSWORD',
];

// Compose v2 may be missing where unit tests run, so the compose files are checked structurally: they
// must parse and describe the production topology and the demo that docs/compose.md and the README
// promise (.ci/compose and test/compose run them on a real engine).
describe('docker-compose.yml', () => {
  const compose = readCompose('docker-compose.yml');
  const raw = read('docker-compose.yml');

  it('runs Postgres 16+ with a volume, healthy once it answers over TCP (not during its init phase)', () => {
    const pg = compose.services.postgres!;
    expect(Number(/postgres:(\d+)/.exec(pg.image ?? '')?.[1])).toBeGreaterThanOrEqual(16);
    expect(pg.volumes).toEqual(expect.arrayContaining(['pgdata:/var/lib/postgresql/data', 'pgsocket:/var/run/postgresql']));
    expect(pg.healthcheck?.test.join(' ')).toMatch(/pg_isready .*-h "\$\$HOSTNAME"/);
    expect(seconds(pg.healthcheck?.start_period)).toBeGreaterThanOrEqual(60);
    // Roles are the setup service's now, at every start, not an init script's on a fresh volume only.
    expect(pg.volumes?.some((v) => v.includes('docker-entrypoint-initdb.d'))).toBe(false);
  });

  it("takes Postgres's connection slots from .env (POSTGRES_MAX_CONNECTIONS, 100 by default), as operations.md says for four replicas or more", () => {
    expect(compose.services.postgres?.command).toEqual(['postgres', '-c', 'max_connections=${POSTGRES_MAX_CONNECTIONS:-100}']);
    expect(read('.env.example')).toContain('# POSTGRES_MAX_CONNECTIONS=100');
    expect(read('docs/operations.md')).toContain('POSTGRES_MAX_CONNECTIONS=140');
  });

  it('has a one-shot setup service, as the superuser over the socket, before everything that logs in', () => {
    const setup = compose.services.setup!;
    expect(setup.image).toBe(compose.services.postgres?.image);
    expect(setup.command).toEqual(['sh', '/setup.sh']);
    expect(setup.depends_on).toEqual({ postgres: { condition: 'service_healthy' } });
    expect(setup.volumes).toEqual(
      expect.arrayContaining([
        './deploy/setup/setup.sh:/setup.sh:ro',
        'pgsocket:/var/run/postgresql',
        'worker-secrets:/run/subscriber-mirror/worker',
        'receiver-secrets:/run/subscriber-mirror/receiver',
        'redis-secrets:/run/subscriber-mirror/redis',
      ]),
    );
    // Not the project directory (it holds .env): an earlier release's files come in as variables, optional.
    expect(setup.volumes?.some((v) => v.startsWith('.:') || v.startsWith('./:'))).toBe(false);
    expect(setup.env_file).toEqual(['mirror.env', 'worker.env', 'receiver.env'].map((file) => ({ path: file, required: false })));
    // Every password of .env but Grafana's, none required: an install whose .env lacks one still starts.
    for (const name of COMPOSE_PASSWORDS.filter((n) => n !== 'GRAFANA_ADMIN_PASSWORD')) {
      expect((setup.environment as Record<string, string>)[name], name).toBe(`\${${name}:-}`);
    }
    for (const name of ['redis', 'receiver', 'worker']) {
      expect(compose.services[name]?.depends_on?.setup, name).toEqual({ condition: 'service_completed_successfully' });
    }
  });

  it('reconciles every role, its password, the database and ownership in the setup script', () => {
    const setup = read('deploy/setup/setup.sh');
    expect(setup).toMatch(/ALTER ROLE mirror LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'mpw'/);
    expect(setup).toMatch(/ALTER ROLE subscriber_mirror_receiver LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'rpw'/);
    expect(setup).toMatch(/CREATE ROLE subscriber_mirror_analyst NOLOGIN/);
    expect(setup).toMatch(/CREATE DATABASE mirror OWNER mirror/);
    expect(setup).toMatch(/ALTER DATABASE mirror OWNER TO mirror/);
    expect(setup).toMatch(/OWNER TO mirror', o\.kind, o\.schema, o\.name/);
    expect(setup).toMatch(/REVOKE CREATE ON SCHEMA public FROM PUBLIC/);
    // Missing passwords are generated once and kept, for the services to read.
    for (const [dir, name] of [
      ['worker', 'MIRROR_DB_PASSWORD'],
      ['redis', 'REDIS_PASSWORD'],
      ['receiver', 'RECEIVER_DB_PASSWORD'],
    ]) {
      expect(setup).toContain(`keep "$${dir}" ${name}`);
    }
    // The worker's copy of the Redis password it logs in with (Redis's own is in its volume).
    expect(setup).toContain('printf \'%s\' "$REDIS_PASSWORD" >"$worker/REDIS_PASSWORD"');
    // The Redis password earlier releases generated for the receiver is deleted from every volume.
    expect(setup).not.toContain('keep "$redis" RECEIVER_REDIS_PASSWORD');
    expect(setup).toContain('rm -f "$receiver/RECEIVER_REDIS_PASSWORD" "$redis/RECEIVER_REDIS_PASSWORD"');
  });

  // An earlier release's files pass on only what each service takes: an allow list, the same names as
  // the service's `environment:` (less its passwords and what compose sets), so the receiver never
  // gets a credential of the worker's whatever file held it.
  it("passes each service an allow list of an earlier release's settings, equal to its environment", () => {
    const setup = read('deploy/setup/setup.sh');
    const list = (name: string) => (new RegExp(`^${name}="([^"]*)"`, 'm').exec(setup)?.[1] ?? '').split(/\s+/).filter(Boolean).sort();
    const own = (service: string) =>
      environmentNames(compose.services[service])
        .filter((n) => !n.endsWith('_PASSWORD') && !n.startsWith('OPS_'))
        .sort();
    expect(list('WORKER_SETTINGS')).toEqual(own('worker'));
    expect(list('RECEIVER_SETTINGS')).toEqual(own('receiver'));
    for (const secret of RECEIVER_NEVER) expect(list('RECEIVER_SETTINGS'), secret).not.toContain(secret);
    expect(setup).toMatch(/^allowed \$WORKER_SETTINGS >"\$worker\/old-settings\.env"$/m);
    expect(setup).toMatch(/^allowed \$RECEIVER_SETTINGS >"\$receiver\/old-settings\.env"$/m);
    // The allow list is the only way settings reach a service: no copy of whole files, no deny list.
    expect(setup).not.toMatch(/grep -Ev|\/project/);
  });

  it("runs the allow list: the receiver's copy holds its settings only, whatever the files held", () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'setup-allow-'));
    try {
      const setup = read('deploy/setup/setup.sh');
      // The part of setup.sh that writes the copies, with the directories of a test (no Postgres, no chown).
      const lists = setup.slice(setup.indexOf('WORKER_SETTINGS='), setup.indexOf('\nmkdir -p'));
      const writes = setup.slice(setup.indexOf('allowed() {'), setup.indexOf('\n# An earlier release ran Redis'));
      const script = `say() { printf 'setup: %s\\n' "$*"; }\nworker=${dir}/w\nreceiver=${dir}/r\nmkdir -p $worker $receiver\n${lists}\n${writes}\n`;
      const run = spawnSync('sh', ['-c', script], {
        env: {
          PATH: process.env.PATH,
          MAILER_API_KEY: 'k',
          ADMIN_TOKEN: 't',
          WEBHOOK_SECRETS: 's'.repeat(32),
          LOG_LEVEL: 'debug',
          SYNC_GROUPS: '1',
        },
        encoding: 'utf8',
      });
      expect(run.status, run.stderr).toBe(0);
      expect(
        readFileSync(path.join(dir, 'r', 'old-settings.env'), 'utf8')
          .split('\n')
          .sort(),
      ).toEqual(['', 'LOG_LEVEL=debug', `WEBHOOK_SECRETS=${'s'.repeat(32)}`]);
      expect(
        readFileSync(path.join(dir, 'w', 'old-settings.env'), 'utf8')
          .split('\n')
          .sort(),
      ).toEqual(['', 'ADMIN_TOKEN=t', 'LOG_LEVEL=debug', 'MAILER_API_KEY=k', 'SYNC_GROUPS=1']);
      expect(run.stdout).toContain('WARNING: mirror.env, worker.env, receiver.env');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('requires no variable: an upgrade never stops on one a newer release added (Grafana refuses by itself)', () => {
    expect(raw).not.toMatch(/\$\{\w+:\?/);
    const grafana = compose.services.grafana!;
    expect((grafana.environment as Record<string, string>).GF_SECURITY_ADMIN_PASSWORD).toBe('${GRAFANA_ADMIN_PASSWORD:-}');
    expect(grafana.entrypoint?.join(' ')).toMatch(/\[ -n "\$\$GF_SECURITY_ADMIN_PASSWORD" \] \|\| .*exit 2; }; exec \/run\.sh/);
  });

  it("runs Redis 7+ with the worker's password from .env or the generated one, no other user, and a healthcheck", () => {
    const redis = compose.services.redis!;
    expect(Number(/redis:(\d+)/.exec(redis.image ?? '')?.[1])).toBeGreaterThanOrEqual(7);
    expect(redis.healthcheck?.test.join(' ')).toContain('ping');
    expect(redis.command).toEqual(['sh', '/etc/redis/start.sh']);
    // Its own password only: not the worker's volume, which holds the database owner's.
    expect(redis.volumes?.sort()).toEqual(
      ['redisdata:/data', './deploy/redis/start.sh:/etc/redis/start.sh:ro', 'redis-secrets:/run/subscriber-mirror/redis:ro'].sort(),
    );
    expect(environmentNames(redis).sort()).toEqual(['REDIS_MEMORY_LIMIT', 'REDIS_PASSWORD']);
    const start = read('deploy/redis/start.sh');
    expect(start).toMatch(/^dir=\/run\/subscriber-mirror\/redis$/m);
    expect(start).toMatch(/REDIS_PASSWORD="\$\{REDIS_PASSWORD:-\$\(cat "\$dir\/REDIS_PASSWORD"/);
    // BullMQ needs noeviction; maxmemory follows the container's limit.
    expect(start).toMatch(/maxmemory %s\\nmaxmemory-policy noeviction/);
    expect((redis.environment as Record<string, string>).REDIS_MEMORY_LIMIT).toBe(redis.mem_limit);
    // The password goes to redis-server on stdin: not on the command line, which `ps` shows. No
    // other user: the receiver has no Redis credential.
    expect(start).toMatch(/printf 'requirepass "%s"\\n/);
    expect(start).not.toMatch(/^[^#]*\buser \w/m);
    expect(start).toMatch(/\| *\n? *exec redis-server - /);
    expect(JSON.stringify(redis.command)).not.toContain('PASSWORD');
  });

  it.each(['worker', 'receiver'])(
    'builds the %s from this repo, after setup and healthy dependencies, with the cheap health check',
    (name) => {
      const service = compose.services[name]!;
      expect(service.build).toBe('.');
      expect(service.depends_on).toEqual({
        setup: { condition: 'service_completed_successfully' },
        accounts: { condition: 'service_completed_successfully' },
        postgres: { condition: 'service_healthy' },
        redis: { condition: 'service_healthy' },
      });
      expect(service.restart).toBe('unless-stopped');
      expect(service.entrypoint).toEqual(['sh', '/deploy/start.sh', name]);
      expect(service.command).toEqual(['start', '--role', name]);
      expect(service.volumes).toEqual(['./deploy/service/start.sh:/deploy/start.sh:ro', `${name}-secrets:/run/subscriber-mirror:ro`]);
      expect(service.healthcheck?.test).toEqual(TINY_HEALTHCHECK);
      // Room for a loaded host (a check once took 4.45 s) and for the migrations at start.
      expect(seconds(service.healthcheck?.timeout)).toBeGreaterThanOrEqual(10);
      expect(seconds(service.healthcheck?.start_period)).toBeGreaterThanOrEqual(30);
      expect(service.env_file).toBeUndefined();
    },
  );

  it('passes each service settings by name from .env, each a real setting (or its own password)', () => {
    const own = { worker: ['MIRROR_DB_PASSWORD', 'REDIS_PASSWORD'], receiver: ['RECEIVER_DB_PASSWORD'] };
    for (const name of ['worker', 'receiver'] as const) {
      const names = environmentNames(compose.services[name]);
      expect(names.filter((n) => !SETTING_NAMES.includes(n)).sort(), name).toEqual([...own[name]].sort());
      expect(names, name).toEqual(expect.arrayContaining(['OPS_PORT', 'OPS_HOST']));
    }
    const worker = environmentNames(compose.services.worker);
    for (const needed of [
      'MAILER_LEGACY_URL',
      'MAILER_API_KEY',
      'SYNC_GROUPS',
      'MAILER_WEBHOOKS_URL',
      'MAILER_WEBHOOKS_TOKEN',
      'ADMIN_TOKEN',
      'HISTORY',
    ]) {
      expect(worker).toContain(needed);
    }
    expect(environmentNames(compose.services.receiver)).toContain('WEBHOOK_SECRETS');
    expect(worker).not.toContain('WEBHOOK_SECRETS');
  });

  // The node flags and the malloc setting are measured (docs/benchmarks.md, "memory") and written once,
  // the Dockerfile's `ENV NODE_OPTIONS=…` line: the image's entry point, the compose services' start
  // script and the demo's inherit it, `npm start` (deploy/image-env.sh) and the benchmarks read it.
  it("writes the node flags in one place, the image's NODE_OPTIONS, that every start uses", () => {
    const dockerfile = read('Dockerfile');
    const runtime = dockerfile.split(/^(?=FROM )/m).at(-1) ?? '';
    expect(runtime.match(/^ENV NODE_OPTIONS=/gm)).toHaveLength(1);
    expect(PRODUCTION_ENV).toEqual(imageMemoryEnv(dockerfile));
    expect(Object.keys(PRODUCTION_ENV).sort()).toEqual(['MALLOC_MMAP_THRESHOLD_', 'NODE_OPTIONS']);
    expect(IMAGE_NODE_OPTIONS).toEqual(
      expect.arrayContaining(['--enable-source-maps', expect.stringMatching(/^--max-old-space-size=\d+$/)]),
    );
    // No forced collections: nothing exposes gc().
    expect(IMAGE_NODE_OPTIONS).not.toContain('--expose-gc');
    // Node refuses a flag NODE_OPTIONS does not allow (e.g. --heap-growing-percent) at start.
    const node = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(v8.getHeapStatistics().heap_size_limit))'], {
      env: { PATH: process.env.PATH, NODE_OPTIONS: PRODUCTION_ENV.NODE_OPTIONS },
      encoding: 'utf8',
    });
    expect(node.stderr).toBe('');
    expect(node.status).toBe(0);
    expect(Number(node.stdout)).toBeGreaterThanOrEqual(HEAP_CAP);
    expect(Number(node.stdout)).toBeLessThan(HEAP_CAP + NOT_OLD_SPACE);
    // Every start takes them from there and adds none of its own.
    expect(runtime).toMatch(/^ENTRYPOINT \["node", "dist\/cli\.js"\]$/m);
    expect(read('deploy/service/start.sh')).toMatch(/^exec node dist\/cli\.js "\$@"$/m);
    expect(read('deploy/demo/start.sh')).toMatch(/^exec node dist\/cli\.js start --role all$/m);
    const npmStart = (JSON.parse(read('package.json')) as { scripts: { start: string } }).scripts.start;
    expect(npmStart).toBe('sh deploy/image-env.sh node dist/cli.js start');
    const env = spawnSync('sh', [path.join(ROOT, 'deploy/image-env.sh'), 'env'], { env: { PATH: process.env.PATH }, encoding: 'utf8' });
    expect(env.status).toBe(0);
    for (const [name, value] of Object.entries(PRODUCTION_ENV)) expect(env.stdout.split('\n')).toContain(`${name}=${value}`);
    // Flags the caller adds come after the image's, so they win.
    const own = spawnSync('sh', [path.join(ROOT, 'deploy/image-env.sh'), 'env'], {
      env: { PATH: process.env.PATH, NODE_OPTIONS: '--max-old-space-size=512' },
      encoding: 'utf8',
    });
    expect(own.stdout.split('\n')).toContain(`NODE_OPTIONS=${PRODUCTION_ENV.NODE_OPTIONS} --max-old-space-size=512`);
  });

  it('names no node memory flag, nor the malloc setting, anywhere else', () => {
    const flag =
      /--(max-old-space-size|max-semi-space-size|heap-growing-percent|expose-gc|initial-heap-size|max-heap-size)\b|MALLOC_[A-Z_]+=/;
    const files = (dir: string): string[] =>
      readdirSync(path.join(ROOT, dir)).flatMap((name) => {
        const rel = path.join(dir, name);
        return statSync(path.join(ROOT, rel)).isDirectory() ? files(rel) : [rel];
      });
    const sources = [
      ...['src', 'test', 'deploy', '.ci', 'monitoring'].flatMap(files),
      'package.json',
      'docker-compose.yml',
      'docker-compose.demo.yml',
      'configure',
      '.env.example',
    ].filter((file) => file !== path.join('test', 'unit', 'compose.test.ts'));
    expect(sources.filter((file) => flag.test(read(file)))).toEqual([]);
    // Nothing forces a collection.
    expect(sources.filter((file) => file.startsWith('src') && /\bgc\s*\(|globalThis\.gc\b/.test(read(file)))).toEqual([]);
  });

  // A setting added later must reach the service that reads it (AUDIT_SETTLE once did not): every
  // setting is passed to the worker or the receiver, or named here with the reason it is not.
  const NOT_PASSED: Record<string, string> = {
    DATABASE_URL: 'deploy/service/start.sh builds it from the service role and its password',
    REDIS_URL: 'deploy/service/start.sh builds it from the service user and its password',
    PORT: 'the default, 8080, is the one published port',
    HOST: 'the default, 0.0.0.0, inside a container: the port mapping decides exposure',
    ADMIN_ON_PUBLIC_PORT: 'the stack serves the admin routes on the ops port only',
    EXPOSE_ADMIN_BEYOND_LOOPBACK: 'only meaningful with ADMIN_ON_PUBLIC_PORT',
  };
  // Each container's memory is bounded by the kernel (docs/compose.md, "Memory limits"); swap would
  // only hide a leak more slowly. The node services' limit sits above the image's heap cap plus what
  // node holds outside the old space, so node stops with "heap out of memory" (a message, a restart)
  // before the kernel's OOM killer takes it without one.
  it("limits every service's memory, swap included, each limit a variable of .env with a default", () => {
    const limits = Object.entries(compose.services).map(([name, service]) => ({ name, service, ...memoryLimitOf(service) }));
    for (const { name, service, variable, bytes } of limits) {
      expect(variable, name).toMatch(/^[A-Z]+_MEMORY_LIMIT$/);
      expect(service.memswap_limit, name).toBe(service.mem_limit);
      expect(bytes, name).toBeGreaterThanOrEqual(64 * MiB);
    }
    expect(new Set(limits.map((l) => l.variable)).size).toBe(limits.length);
    for (const name of ['worker', 'receiver']) {
      expect(memoryLimitOf(compose.services[name]!).bytes, name).toBeGreaterThanOrEqual(HEAP_CAP + NOT_OLD_SPACE);
    }
    // Postgres holds its shared buffers (the image's default, 128 MB) and a backend per connection.
    expect(memoryLimitOf(compose.services.postgres!).bytes).toBeGreaterThanOrEqual(512 * MiB);
    const documented = read('docs/compose.md');
    for (const { variable } of limits) expect(documented, variable).toContain(variable);
  });

  it('passes every setting to a service, or says why not', () => {
    const passed = new Set([...environmentNames(compose.services.worker), ...environmentNames(compose.services.receiver)]);
    const notPassed = settingsOf(SETTINGS)
      .filter((s) => ![...s.names].some((n) => passed.has(n)))
      .map((s) => [...s.names][0]);
    expect(notPassed.sort()).toEqual(Object.keys(NOT_PASSED).sort());
  });

  // The receiver is the one container on the internet: whoever takes it over gets its environment
  // and its database role (test/integration/db-receiver-role.test.ts); since issue 37 no Redis user.
  it('gives the receiver its own database role and no credential beyond it', () => {
    const receiver = compose.services.receiver!;
    const names = environmentNames(receiver);
    for (const secret of RECEIVER_NEVER) expect(names, secret).not.toContain(secret);
    const start = read('deploy/service/start.sh');
    const receiverCase = /^ {2}receiver\)[\s\S]*?;;/m.exec(start)?.[0] ?? '';
    expect(receiverCase).toMatch(/postgres:\/\/subscriber_mirror_receiver:\$\(secret RECEIVER_DB_PASSWORD\)@postgres:5432\/mirror/);
    expect(receiverCase).not.toMatch(/redis:\/\//);
    expect(start).toMatch(/if \[ -n "\$REDIS_URL" \]; then export REDIS_URL; else unset REDIS_URL; fi/);
    expect(start).toMatch(/postgres:\/\/mirror:\$\(secret MIRROR_DB_PASSWORD\)@postgres:5432\/mirror/);
    expect(existsSync(path.join(ROOT, 'deploy/redis/receiver.acl'))).toBe(false);
  });

  it('keeps one settings file, .env, out of git and of the image build; .env.example names only settings and passwords', () => {
    for (const file of ['mirror.env.example', 'worker.env.example', 'receiver.env.example']) {
      expect(existsSync(path.join(ROOT, file)), file).toBe(false);
    }
    const variables = variablesOf('.env.example');
    const limits = Object.values(compose.services).map((service) => memoryLimitOf(service).variable);
    // And what Compose itself reads for the https profile (docs/compose.md, "HTTPS").
    const https = ['COMPOSE_PROFILES', 'PUBLIC_DOMAIN', 'PROXY_TLS', 'ACME_EMAIL', 'RECEIVER_PUBLISH'];
    // And Postgres's own connection slots (the postgres service's command).
    const postgres = ['POSTGRES_MAX_CONNECTIONS'];
    // And the example account's own settings (docs/operations.md, "Several accounts").
    const account = PER_ACCOUNT_SETTINGS.map((setting) => `ACCOUNT_SHOP__${setting}`);
    expect(
      variables.filter(
        (v) =>
          !SETTING_NAMES.includes(v) &&
          !COMPOSE_PASSWORDS.includes(v) &&
          !limits.includes(v) &&
          !https.includes(v) &&
          !postgres.includes(v) &&
          !account.includes(v),
      ),
    ).toEqual([]);
    expect(variables).toEqual(expect.arrayContaining(https));
    expect(variables).toEqual(expect.arrayContaining(['WORKER_MEMORY_LIMIT', 'RECEIVER_MEMORY_LIMIT']));
    expect(variables).toEqual(expect.arrayContaining([...COMPOSE_PASSWORDS, 'MAILER_API_KEY', 'SYNC_GROUPS', 'ADMIN_TOKEN']));
    for (const ignore of ['.gitignore', '.dockerignore']) {
      const patterns = read(ignore).split('\n');
      expect(patterns, ignore).toContain('.env');
      // An earlier release's files, still read for one release, hold secrets too.
      for (const file of ['mirror.env', 'worker.env', 'receiver.env']) {
        expect(
          patterns.some((p) => p === file || p === `/${file}` || p === '*.env'),
          `${ignore} ${file}`,
        ).toBe(true);
      }
    }
  });

  // docs/operations.md, "Several accounts": variables ACCOUNT_<NAME>__<SETTING> whose names only .env
  // knows. The accounts service (deploy/setup/accounts.sh) gets .env and writes each service its share.
  describe('the accounts service', () => {
    const script = read('deploy/setup/accounts.sh');
    const list = (name: string) => (new RegExp(`^${name}="([^"]*)"`, 'm').exec(script)?.[1] ?? '').split(/\s+/).filter(Boolean).sort();
    const perAccountOf = (service: string, has: boolean) =>
      PER_ACCOUNT_SETTINGS.filter((n) => environmentNames(compose.services[service]).includes(n) === has).sort();

    it('is the one container given .env whole: a one-shot after setup, as the services’ user, with no network', () => {
      const accounts = compose.services.accounts as Service & { network_mode?: string };
      expect(accounts.image).toBe(compose.services.setup?.image);
      expect(accounts.command).toEqual(['sh', '/accounts.sh']);
      expect(accounts.env_file).toEqual([{ path: '.env', required: false }]);
      expect(accounts.environment).toBeUndefined();
      expect(accounts.user).toBe('1000:1000');
      expect(accounts.network_mode).toBe('none');
      expect(accounts.cap_add).toBeUndefined();
      expect(accounts.volumes?.sort()).toEqual(
        [
          './deploy/setup/accounts.sh:/accounts.sh:ro',
          'worker-secrets:/run/subscriber-mirror/worker',
          'receiver-secrets:/run/subscriber-mirror/receiver',
        ].sort(),
      );
      expect(accounts.depends_on).toEqual({ setup: { condition: 'service_completed_successfully' } });
      expect(accounts.restart).toBe('no');
      const withDotenv = Object.entries(compose.services).filter(([, service]) =>
        (service.env_file ?? []).some((f) => (typeof f === 'string' ? f : f.path) === '.env'),
      );
      expect(withDotenv.map(([name]) => name)).toEqual(['accounts']);
      // setup.sh leaves the volumes to the `node` user (uid 1000), which this service runs as.
      expect(read('deploy/setup/setup.sh')).toMatch(/^NODE_UID=1000 /m);
    });

    it("gives each service the per-account settings its environment takes unprefixed, the receiver's webhook secrets only", () => {
      expect(list('WORKER_ALL_BUT')).toEqual(perAccountOf('worker', false));
      expect(list('RECEIVER_ONLY')).toEqual(perAccountOf('receiver', true));
      expect(list('RECEIVER_ONLY')).toEqual(['WEBHOOK_SECRETS']);
      for (const secret of RECEIVER_NEVER) expect(list('RECEIVER_ONLY'), secret).not.toContain(secret);
      for (const name of ['worker', 'receiver']) expect(environmentNames(compose.services[name]), name).toContain('ACCOUNTS');
    });

    /** Runs accounts.sh on directories of a test (no chown: the test's user owns them), with `env`. */
    function runAccounts(dir: string, env: Record<string, string>) {
      const run = spawnSync('sh', ['-c', script.replace(/^out=\/run\/subscriber-mirror$/m, `out=${dir}`)], {
        env: { PATH: process.env.PATH, ...env },
        encoding: 'utf8',
      });
      expect(run.status, run.stderr).toBe(0);
      return run;
    }
    const lines = (file: string) => readFileSync(file, 'utf8').split('\n').filter(Boolean).sort();

    it('writes the receiver no per-account API key nor token, whatever .env holds; the worker every read setting', () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'accounts-'));
      try {
        for (const name of ['worker', 'receiver']) mkdirSync(path.join(dir, name), { mode: 0o500 });
        const env = {
          ACCOUNTS: 'default,shop,eu_',
          MAILER_API_KEY: 'key-default',
          ADMIN_TOKEN: 'admin-token-0123456789',
          RECEIVER_DB_PASSWORD: 'pw',
          ACCOUNT_SHOP__MAILER_API_KEY: 'key-shop',
          ACCOUNT_SHOP__MAILER_API_TOKEN: 'tok-shop',
          ACCOUNT_SHOP__MAILER_WEBHOOKS_TOKEN: 'tok-shop',
          ACCOUNT_SHOP__SYNC_GROUPS: '1,2',
          ACCOUNT_SHOP__WEBHOOK_SECRETS: 'whsec-shop-0123456789,whsec-shop-next-0123',
          ACCOUNT_EU____MAILER_API_URL: 'https://connect.example.com',
          ACCOUNT_EU____WEBHOOK_SECRETS: 'whsec-eu-0123456789',
          ACCOUNT_SHOP__SYNC_EVERY: '1m',
        };
        const run = runAccounts(dir, env);
        expect(run.stderr).toMatch(/ACCOUNTS=default,shop,eu_\): 6 per-account variables for the worker, 2 for the receiver/);
        // The receiver's, the one container on the internet: the webhook secrets, no key or token.
        expect(lines(path.join(dir, 'receiver', 'accounts.env'))).toEqual([
          'ACCOUNT_EU____WEBHOOK_SECRETS=whsec-eu-0123456789',
          'ACCOUNT_SHOP__WEBHOOK_SECRETS=whsec-shop-0123456789,whsec-shop-next-0123',
        ]);
        expect(lines(path.join(dir, 'worker', 'accounts.env'))).toEqual([
          'ACCOUNT_EU____MAILER_API_URL=https://connect.example.com',
          'ACCOUNT_SHOP__MAILER_API_KEY=key-shop',
          'ACCOUNT_SHOP__MAILER_API_TOKEN=tok-shop',
          'ACCOUNT_SHOP__MAILER_WEBHOOKS_TOKEN=tok-shop',
          // A deployment-wide setting given per account reaches the worker, which refuses it by name.
          'ACCOUNT_SHOP__SYNC_EVERY=1m',
          'ACCOUNT_SHOP__SYNC_GROUPS=1,2',
        ]);
        // Nothing unprefixed: the services' `environment:` passes that.
        expect(readFileSync(path.join(dir, 'worker', 'accounts.env'), 'utf8')).not.toMatch(
          /^(MAILER_API_KEY|ADMIN_TOKEN|RECEIVER_DB_PASSWORD|ACCOUNTS)=/m,
        );
        for (const name of ['worker', 'receiver']) {
          expect(statSync(path.join(dir, name)).mode & 0o777, name).toBe(0o500);
          expect(statSync(path.join(dir, name, 'accounts.env')).mode & 0o777, name).toBe(0o400);
        }
        // The next `up` replaces both files whole: an account gone from .env is gone from them.
        runAccounts(dir, { ACCOUNTS: 'default', MAILER_API_KEY: 'key-default' });
        expect(lines(path.join(dir, 'worker', 'accounts.env'))).toEqual([]);
        expect(lines(path.join(dir, 'receiver', 'accounts.env'))).toEqual([]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it("puts the receiver's share, and nothing more, in the receiver's process environment (start.sh)", () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'accounts-start-'));
      try {
        const volume = path.join(dir, 'receiver');
        mkdirSync(volume);
        writeFileSync(path.join(volume, 'accounts.env'), 'ACCOUNT_SHOP__WEBHOOK_SECRETS=whsec-shop-0123456789\nNOT_AN_ACCOUNT=1\n');
        // A `node` that prints the environment it is started with.
        const bin = path.join(dir, 'bin');
        mkdirSync(bin);
        writeFileSync(path.join(bin, 'node'), '#!/bin/sh\nenv\n', { mode: 0o755 });
        const start = read('deploy/service/start.sh').replace(/^dir=\/run\/subscriber-mirror$/m, `dir=${volume}`);
        const run = spawnSync('sh', ['-c', start, 'start.sh', 'receiver', 'start'], {
          env: { PATH: `${bin}:${process.env.PATH}`, RECEIVER_DB_PASSWORD: 'pw', ACCOUNTS: 'default,shop' },
          encoding: 'utf8',
        });
        expect(run.status, run.stderr).toBe(0);
        const names = run.stdout.split('\n').map((l) => l.split('=')[0]);
        expect(run.stdout.split('\n')).toContain('ACCOUNT_SHOP__WEBHOOK_SECRETS=whsec-shop-0123456789');
        expect(names).not.toContain('NOT_AN_ACCOUNT');
        expect(names.filter((n) => n?.startsWith('ACCOUNT_'))).toEqual(['ACCOUNT_SHOP__WEBHOOK_SECRETS']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
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
    expect(published).toEqual(['receiver ${RECEIVER_PUBLISH:-8080}:8080']);
    // The internal endpoints are on OPS_PORT, which differs from the published port.
    for (const name of ['receiver', 'worker']) expect(compose.services[name]?.environment, name).toContain('OPS_PORT=9090');
  });

  // One place says which versions the stack runs (deploy/versions.env, docs/security.md "Image versions").
  it('names exactly the image versions of deploy/versions.env, in both compose files and the Dockerfile', () => {
    const versions = Object.fromEntries(
      read('deploy/versions.env')
        .split('\n')
        .filter((l) => /^[A-Z_]+=/.test(l))
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    const demo = readCompose('docker-compose.demo.yml');
    expect(compose.services.postgres?.image).toBe(versions.POSTGRES_IMAGE);
    expect(compose.services.setup?.image).toBe(versions.POSTGRES_IMAGE);
    expect(compose.services.redis?.image).toBe(versions.REDIS_IMAGE);
    expect(compose.services.prometheus?.image).toBe(versions.PROMETHEUS_IMAGE);
    expect(compose.services.grafana?.image).toBe(versions.GRAFANA_IMAGE);
    expect(demo.services['demo-postgres']?.image).toBe(versions.POSTGRES_IMAGE);
    expect(demo.services['demo-redis']?.image).toBe(versions.REDIS_IMAGE);
    expect(read('Dockerfile')).toMatch(new RegExp(`^ARG NODE_VERSION=${versions.NODE_VERSION?.replaceAll('.', '\\.')}$`, 'm'));
    expect(read('deploy/proxy/Dockerfile')).toMatch(new RegExp(`^FROM ${versions.PROXY_BASE_IMAGE}$`, 'm'));
    // Every image either comes from there or is built here.
    const named = [...Object.values(compose.services), ...Object.values(demo.services)]
      .filter((service) => !service.build)
      .map((service) => service.image);
    expect(named.filter((image) => !Object.values(versions).includes(image ?? ''))).toEqual([]);
    // The security doc lists each version and what it fixed.
    const security = read('docs/security.md');
    for (const image of Object.values(versions)) expect(security, image).toContain(image.replace(/^[^:]*:/, ''));
  });

  it('runs every long-running production container with an init and pinned image tags', () => {
    for (const [name, s] of production()) {
      // The one-shots (setup, accounts) run a script to its end: no children to reap, no signal to pass on.
      if (s.restart !== 'no') expect(s.init, name).toBe(true);
      if (s.image && !s.build) expect(s.image, name).toMatch(/:\d+\.\d+\.?\d*-[a-z]/);
    }
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^ARG NODE_VERSION=\d+\.\d+\.\d+$/m);
    expect(dockerfile.match(/^FROM .*$/gm)?.every((line) => line.includes('node:${NODE_VERSION}-bookworm-slim'))).toBe(true);
  });

  it('declares the volumes it uses', () => {
    expect(Object.keys(compose.volumes).sort()).toEqual([
      'grafanadata',
      'pgdata',
      'pgsocket',
      'promdata',
      'proxy-config',
      'proxy-data',
      'receiver-secrets',
      'redis-secrets',
      'redisdata',
      'worker-secrets',
    ]);
  });

  // docs/compose.md, "HTTPS": the production path on the internet.
  it('puts a TLS-terminating proxy in front of the receiver with the https profile', () => {
    const proxy = compose.services.proxy!;
    expect(proxy.profiles).toEqual(['https']);
    expect(proxy.build).toBe('./deploy/proxy');
    expect(proxy.ports?.sort()).toEqual(['443:443', '80:80']);
    expect(proxy.depends_on).toEqual({ receiver: { condition: 'service_healthy' } });
    expect(proxy.environment).toEqual({
      PUBLIC_DOMAIN: '${PUBLIC_DOMAIN:-}',
      PROXY_TLS: '${PROXY_TLS:-acme}',
      ACME_EMAIL: '${ACME_EMAIL:-}',
    });
    // Low ports without a capability: the container's own network namespace allows them.
    expect(proxy.sysctls).toEqual({ 'net.ipv4.ip_unprivileged_port_start': 0 });
    const start = read('deploy/proxy/start.sh');
    expect(start).toMatch(/reverse_proxy receiver:8080/);
    expect(start).toMatch(/internal\) tls="tls internal"/);
    expect(start).toMatch(/protocols h1/);
    // The host name goes into the Caddyfile: checked to be one first.
    expect(start).toMatch(/\*\[!A-Za-z0-9\.-\]\*/);
    // ./configure --domain: the proxy the way in, the receiver on loopback, the proxy's header trusted.
    const configure = read('configure');
    expect(configure).toMatch(/COMPOSE_PROFILES=https\\nPUBLIC_DOMAIN=%s/);
    expect(configure).toContain('RECEIVER_PUBLISH=127.0.0.1:8080\\nTRUST_PROXY=1');
  });

  it('runs every container least-privileged: non-root, read-only root, no capabilities, no-new-privileges', () => {
    const demo = readCompose('docker-compose.demo.yml');
    const services = [...Object.entries(compose.services), ...Object.entries(demo.services)];
    for (const [name, service] of services) {
      expect(service.read_only, name).toBe(true);
      expect(service.cap_drop, name).toEqual(['ALL']);
      expect(service.security_opt, name).toEqual(['no-new-privileges:true']);
      if (name === 'setup') continue;
      // 1000:1000: the service image's `node`, for the accounts service on the Postgres image.
      expect(service.user, name).toMatch(/^(node|postgres|redis|caddy|nobody|472|1000:1000)$/);
      expect(service.cap_add, name).toBeUndefined();
    }
    // The one root container, and what it may do: hand each service its secrets (docs/compose.md, "Containers").
    expect(compose.services.setup?.user).toBeUndefined();
    expect(compose.services.setup?.cap_add).toEqual(['CHOWN', 'DAC_OVERRIDE', 'FOWNER']);
    // Scratch where a process writes outside its volumes.
    for (const name of ['worker', 'receiver', 'postgres', 'proxy']) expect(compose.services[name]?.tmpfs, name).toEqual(['/tmp']);
    const documented = read('docs/compose.md');
    expect(documented).toMatch(/`CHOWN`, `DAC_OVERRIDE`, `FOWNER`/);
  });

  it('has a Dockerfile whose entrypoint is the CLI', () => {
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^ENTRYPOINT \["node", "dist\/cli\.js"\]$/m);
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
    const environment = service.environment as Record<string, string> | undefined;
    expect(environment?.MAILER_LEGACY_URL).toBe('http://simulator:4010');
    expect(environment?.DATABASE_URL).toMatch(/@demo-postgres:5432\/mirror$/);
    expect(environment?.REDIS_URL).toBe('redis://demo-redis:6379');
    expect(environment?.ADMIN_TOKEN).toBeUndefined();
    expect(service.depends_on?.simulator).toEqual({ condition: 'service_healthy' });
    expect(service.entrypoint).toEqual(['sh', '/demo/start.sh']);
    expect(service.volumes).toContain('./deploy/demo/start.sh:/demo/start.sh:ro');
    const start = read('deploy/demo/start.sh');
    expect(start).toMatch(/randomBytes\(18\)/);
    expect(start).toMatch(
      /migrate\n.*webhooks register --url "\$DEMO_WEBHOOK_URL"[^\n]*\n[\s\S]*admin token \$\{ADMIN_TOKEN\}[\s\S]*exec node .*start --role all/,
    );
  });

  it("limits every container's memory as production does, the service's own above the heap cap", () => {
    for (const [name, service] of Object.entries(demo.services)) {
      expect(service.memswap_limit, name).toBe(service.mem_limit);
      expect(memoryLimitOf(service).bytes, name).toBeGreaterThanOrEqual(64 * MiB);
    }
    for (const name of ['demo', 'simulator']) {
      expect(memoryLimitOf(demo.services[name]!).bytes, name).toBeGreaterThanOrEqual(HEAP_CAP + NOT_OLD_SPACE);
    }
  });

  it('uses the production images and health checks', () => {
    expectTcpLoginHealthcheck(demo.services['demo-postgres']!);
    expect(demo.services['demo-postgres']?.image).toBe(production.services.postgres?.image);
    expect(demo.services['demo-redis']?.image).toBe(production.services.redis?.image);
    expect(demo.services.demo?.healthcheck?.test).toEqual(TINY_HEALTHCHECK);
    expect(demo.services.demo?.image).toBe(production.services.worker?.image);
  });
});
