/**
 * No accidental exposure (docs/security.md, "What is on the ops port"): ADMIN_ON_PUBLIC_PORT with a
 * HOST beyond loopback is refused unless confirmed; TRUST_PROXY's examples name no Docker range; the
 * dashboard is read-only unless DASHBOARD_WRITE.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as ConfigError).problems;
  }
  throw new Error('expected a ConfigError');
}

const TOKEN = 'a'.repeat(32);

describe('ADMIN_ON_PUBLIC_PORT beyond loopback', () => {
  it.each(['0.0.0.0', '::', '192.0.2.10', 'mirror.example.com'])('is refused with HOST=%s, naming the safe alternatives', (host) => {
    const problems = problemsOf({ ADMIN_TOKEN: TOKEN, ADMIN_ON_PUBLIC_PORT: 'true', HOST: host });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^ADMIN_ON_PUBLIC_PORT: /);
    for (const alternative of ['OPS_PORT', 'HOST=127.0.0.1', 'EXPOSE_ADMIN_BEYOND_LOOPBACK=true']) {
      expect(problems[0]).toContain(alternative);
    }
  });

  it('is refused with the default HOST (every interface), even without ADMIN_TOKEN (/metrics and the detailed /readyz)', () => {
    expect(problemsOf({ ADMIN_ON_PUBLIC_PORT: 'true' })[0]).toMatch(/^ADMIN_ON_PUBLIC_PORT: /);
  });

  it.each(['127.0.0.1', '127.1.2.3', '::1', 'localhost'])('is accepted on loopback (HOST=%s)', (host) => {
    expect(loadConfig({ ADMIN_TOKEN: TOKEN, ADMIN_ON_PUBLIC_PORT: 'true', HOST: host }).opsOnPublicPort).toBe(true);
  });

  it('is accepted beyond loopback when confirmed by EXPOSE_ADMIN_BEYOND_LOOPBACK=true', () => {
    const config = loadConfig({ ADMIN_TOKEN: TOKEN, ADMIN_ON_PUBLIC_PORT: 'true', EXPOSE_ADMIN_BEYOND_LOOPBACK: 'true' });
    expect(config.opsOnPublicPort).toBe(true);
    expect(config.host).toBe('0.0.0.0');
  });
});

describe('DASHBOARD_WRITE', () => {
  it('is off by default and on only when set', () => {
    expect(loadConfig({}).dashboardWrite).toBe(false);
    expect(loadConfig({ DASHBOARD_WRITE: 'true' }).dashboardWrite).toBe(true);
  });
});

describe('TRUST_PROXY examples', () => {
  it("name no Docker range (trusting Docker's bridge lets every container pick its own address)", () => {
    const docker = /172\.(1[6-9]|2\d|3[01])\.\d+\.\d+\/\d+|172\.16\.0\.0\/12|192\.168\.0\.0\/16/;
    for (const file of ['.env.example', 'docs/security.md', 'docs/operations.md', 'src/config.ts']) {
      expect(readFileSync(file, 'utf8'), file).not.toMatch(docker);
    }
    const problems = problemsOf({ TRUST_PROXY: 'proxy.example.com' });
    expect(problems[0]).not.toMatch(docker);
  });
});
