/**
 * Child process of the memory benchmark (memory.bench.ts): runs one full poll pass of every given
 * type against a simulator in another process and reports its own peak RSS as one JSON line on
 * stdout. Kept apart from the simulator, which holds the whole world in memory (docs/architecture.md,
 * invariant 8 is about the pass: memory must not grow with group size).
 *
 *   node --import tsx test/bench/memory-pass.child.ts '<MemoryChildConfig as JSON>'
 *
 * RSS is sampled every `sampleMs` (process.memoryUsage) and compared with the kernel's high-water
 * mark (process.resourceUsage().maxRSS, kB), which also catches a peak between two samples.
 */
import pg from 'pg';
import { ACCOUNT_SETTING, DEFAULT_ACCOUNT } from '../../src/db/client.js';
import type { SubscriberType } from '../../src/db/schema.js';
import { createLogger } from '../../src/ground/log.js';
import { runPass, type PassDeps } from '../../src/sync/legacy-pass.js';
import { createLegacyClient } from '../../src/upstream/legacy/client.js';
import { createLimiter } from '../../src/ratelimit/limiter.js';

export interface MemoryChildConfig {
  simulatorUrl: string;
  apiKey: string;
  apiKeyHeader: string;
  databaseUrl: string;
  groupId: string;
  types: SubscriberType[];
  pageSize: number;
  sampleMs: number;
}

export interface MemoryChildReport {
  rows: number;
  rowsWritten: number;
  requests: number;
  passMs: number;
  /** RSS after imports and the first database round trip, before the pass (MB). */
  rssBeforeMb: number;
  /** Highest sampled RSS during the pass (MB). */
  rssPeakSampledMb: number;
  /** process.resourceUsage().maxRSS at the end (kB → MB): the kernel's high-water mark of the whole process life. */
  maxRssMb: number;
  rssEndMb: number;
  heapUsedPeakMb: number;
  heapTotalPeakMb: number;
  externalPeakMb: number;
  samples: number;
  /** RSS (MB) at 1/10 … 10/10 of the pass's samples, to show whether memory grows with the pass. */
  rssProfileMb: number[];
}

const MB = 1024 * 1024;

function mb(bytes: number): number {
  return Math.round((bytes / MB) * 10) / 10;
}

async function main(): Promise<void> {
  const config = JSON.parse(process.argv[2] ?? '') as MemoryChildConfig;
  const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 2, options: `-c ${ACCOUNT_SETTING}=${DEFAULT_ACCOUNT}` });
  pool.on('error', () => {});
  const { logger } = createLogger({ level: 'silent' });
  const deps: PassDeps = {
    pool,
    legacy: createLegacyClient({
      baseUrl: config.simulatorUrl,
      apiKey: config.apiKey,
      apiKeyHeader: config.apiKeyHeader,
      limiter: createLimiter({ mode: 'off', perMinute: 60 }),
    }),
    logger,
    sourceTimezone: 'UTC',
    lookbackMs: 86_400_000,
    pageSize: config.pageSize,
    groupTypes: config.types,
  };
  await pool.query('select 1');
  const rssBefore = process.memoryUsage().rss;

  const peak = { rss: 0, heapUsed: 0, heapTotal: 0, external: 0 };
  const series: number[] = [];
  const sample = () => {
    const m = process.memoryUsage();
    peak.rss = Math.max(peak.rss, m.rss);
    peak.heapUsed = Math.max(peak.heapUsed, m.heapUsed);
    peak.heapTotal = Math.max(peak.heapTotal, m.heapTotal);
    peak.external = Math.max(peak.external, m.external);
    series.push(m.rss);
  };
  const timer = setInterval(sample, config.sampleMs);
  const started = performance.now();
  let rows = 0;
  let rowsWritten = 0;
  let requests = 0;
  try {
    for (const type of config.types) {
      const result = await runPass(deps, config.groupId, type, 'full');
      rows += result.rowsSeen;
      rowsWritten += result.rowsWritten;
      requests += result.requests;
    }
  } finally {
    clearInterval(timer);
    sample();
    await pool.end();
  }
  const passMs = performance.now() - started;
  const profile = Array.from({ length: 10 }, (_, i) =>
    mb(series[Math.min(series.length - 1, Math.floor(((i + 1) * series.length) / 10) - 1)] ?? 0),
  );
  const report: MemoryChildReport = {
    rows,
    rowsWritten,
    requests,
    passMs: Math.round(passMs),
    rssBeforeMb: mb(rssBefore),
    rssPeakSampledMb: mb(peak.rss),
    maxRssMb: Math.round((process.resourceUsage().maxRSS / 1024) * 10) / 10,
    rssEndMb: mb(process.memoryUsage().rss),
    heapUsedPeakMb: mb(peak.heapUsed),
    heapTotalPeakMb: mb(peak.heapTotal),
    externalPeakMb: mb(peak.external),
    samples: series.length,
    rssProfileMb: profile,
  };
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
