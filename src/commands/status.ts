/**
 * `subscriber-mirror status [--json]`: per group × type the cursor, last run, rows, drift and audit
 * accuracy; the auth pause, the learned rate budgets and the webhooks' health.
 */
import { loadConfig, NOTHING_RECONCILES, readCredentialOf } from '../config.js';
import { DEFAULT_ACCOUNT, openDatabase } from '../db/client.js';
import { formatBudgetReport, readRateBudgets, type BudgetReport } from '../ratelimit/budget-limiter.js';
import { authPauseKey, isPaused, readAuthPause } from '../sync/auth-pause.js';
import { auditScheduleNotice, collectStatus, formatStatusTable, webhookHealth } from '../sync/status.js';
import { printable } from '../ground/terminal.js';
import { parseOptions, type Command } from './args.js';
import { configuredAuditSchedule } from './audit-settings.js';
import { describeConnectionError } from './connection-error.js';

/** Pass errors and auth messages quote the service: shown, never executed by the terminal. */
const out = (text: string) => process.stdout.write(printable(text));

export const statusCommand: Command = async (args) => {
  const { values } = parseOptions(args, { json: { type: 'boolean', default: false } });
  const config = loadConfig(process.env, ['database']);
  const database = openDatabase(config.databaseUrl, { max: 1, account: DEFAULT_ACCOUNT });
  try {
    const auditSchedule = configuredAuditSchedule(config);
    const rows = await collectStatus(database.pool, { groups: config.sync.groups, types: config.sync.types, auditSchedule });
    const webhooks = await webhookHealth(database.pool);
    let pause = null;
    let rateBudgets: BudgetReport | null = null;
    const credential = readCredentialOf(config);
    if (credential) {
      const { Redis } = await import('ioredis');
      const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
      try {
        await redis.connect();
        const p = await readAuthPause(redis, authPauseKey(config.redisPrefix, credential));
        pause = isPaused(p) ? p : null;
        rateBudgets = await readRateBudgets(redis, config.redisPrefix);
      } finally {
        redis.disconnect();
      }
    }
    if (values.json) {
      const reads = config.sync.reconciles ? { source: config.sync.source } : { source: null, notice: NOTHING_RECONCILES };
      out(`${JSON.stringify({ ...reads, authPause: pause, rateBudgets, audit: auditSchedule, passes: rows, webhooks }, null, 2)}\n`);
    } else {
      if (!config.sync.reconciles) out(`${NOTHING_RECONCILES}\n\n`);
      if (pause) {
        out(`POLLING PAUSED until ${new Date(pause.until).toISOString()} after ${pause.failures} auth failure(s): ${pause.message}\n\n`);
      }
      out(rows.length > 0 ? `${formatStatusTable(rows)}\n` : 'no groups configured and no passes recorded yet\n');
      if (auditSchedule && !auditSchedule.honoured) out(`\n${auditScheduleNotice(auditSchedule, config.audit.budgetShare)}\n`);
      if (rateBudgets) out(`\n${formatBudgetReport(rateBudgets)}\n`);
      for (const w of webhooks.filter((h) => h.problems.length > 0)) {
        out(`WEBHOOK ${w.id}: ${w.problems.join(', ')}${w.missingEvents.length > 0 ? ` (missing ${w.missingEvents.join(', ')})` : ''}\n`);
      }
    }
    return 0;
  } catch (error) {
    throw new Error(`cannot read status: ${describeConnectionError(error)}`);
  } finally {
    await database.close();
  }
};
