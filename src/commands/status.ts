/**
 * `subscriber-mirror status [--json] [--account NAME]`: every account's (or the named one's) pairs (per group × type the cursor, last run,
 * rows, drift and audit accuracy), its auth pause, learned rate budgets and webhooks' health. One
 * account shows as a single-account install always did; several, each under a header of its own
 * (`--json`: `accounts` and `passes`, each pair naming its account).
 */
import type { Redis } from 'ioredis';
import { accountConfig, findAccount, loadConfig, readCredentialOf, type Config } from '../config.js';
import { openDatabase } from '../db/client.js';
import { formatBudgetReport } from '../ratelimit/budget-limiter.js';
import { auditScheduleNotice, formatStatusTable } from '../sync/status.js';
import { printable } from '../ground/terminal.js';
import { collectReports, statusJson, type AccountReport } from '../http/status-report.js';
import { ACCOUNT_OPTION } from './account.js';
import { parseOptions, type Command } from './args.js';
import { describeConnectionError } from './connection-error.js';
import { statusSources } from './status-sources.js';

/** Pass errors and auth messages quote the service: shown, never executed by the terminal. */
const out = (text: string) => process.stdout.write(printable(text));

export const statusCommand: Command = async (args) => {
  const { values } = parseOptions(args, { json: { type: 'boolean', default: false }, ...ACCOUNT_OPTION });
  const config = loadConfig(process.env, ['database']);
  // Every account unless one is named (an undeclared name: exit 2 before anything is read).
  const shown = values.account === undefined ? config.accounts : [findAccount(config, values.account)];
  // Deployment-wide: the reader names every account itself, so the pool serves none.
  const database = openDatabase(config.databaseUrl, { max: 1 });
  let redis: Redis | null = null;
  try {
    if (pollsAnyAccount(config)) redis = await connectRedis(config);
    const reports = await collectReports(database.pool, statusSources(config, redis, shown));
    out(values.json ? `${JSON.stringify(statusJson(reports), null, 2)}\n` : formatStatusText(reports, config.audit.budgetShare));
    return 0;
  } catch (error) {
    throw new Error(`cannot read status: ${describeConnectionError(error)}`);
  } finally {
    redis?.disconnect();
    await database.close();
  }
};

/** Only an account that polls has anything in Redis for status (its auth pause, its rate budgets). */
function pollsAnyAccount(config: Config): boolean {
  return config.accounts.some(({ name }) => readCredentialOf(accountConfig(config, name)) !== undefined);
}

async function connectRedis(config: Config): Promise<Redis> {
  const { Redis } = await import('ioredis');
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
  try {
    await redis.connect();
    return redis;
  } catch (error) {
    redis.disconnect();
    throw error;
  }
}

/** `status`'s text: one account as a single-account install always showed it; several, each after a header naming it. */
export function formatStatusText(reports: readonly AccountReport[], auditShare: number): string {
  const [only, ...others] = reports;
  if (only !== undefined && others.length === 0) return accountText(only, auditShare);
  return reports.map((r) => `${accountHeader(r)}\n\n${accountText(r, auditShare)}`).join('\n');
}

/** `ACCOUNT shop (current, read by 1 worker replica)`; a webhook-only account says so. */
export function accountHeader(r: AccountReport): string {
  const reads = r.source === null ? 'webhooks only' : (r.source ?? '');
  const replicas = r.readBy === null ? [] : [`read by ${r.readBy.length} worker replica${r.readBy.length === 1 ? '' : 's'}`];
  const said = [...(reads ? [reads] : []), ...replicas].join(', ');
  return `ACCOUNT ${r.account}${said ? ` (${said})` : ''}`;
}

/** Said of an account that reads while no live worker replica reads it: its passes do not run. */
export const NOT_READ =
  'NOT READ: no worker replica reads this account now (none running, or none heard from in the last 6 s): its passes do not run until one does';

function accountText(r: AccountReport, auditShare: number): string {
  const lines: string[] = [];
  if (r.notice) lines.push(`${r.notice}\n\n`);
  if (r.readBy !== null && r.readBy.length === 0) lines.push(`${NOT_READ}\n\n`);
  if (r.authPause) {
    const pause = r.authPause;
    lines.push(`POLLING PAUSED until ${new Date(pause.until).toISOString()} after ${pause.failures} auth failure(s): ${pause.message}\n\n`);
  }
  lines.push(r.passes.length > 0 ? `${formatStatusTable(r.passes)}\n` : 'no groups configured and no passes recorded yet\n');
  if (r.audit && !r.audit.honoured) lines.push(`\n${auditScheduleNotice(r.audit, auditShare)}\n`);
  if (r.rateBudgets) lines.push(`\n${formatBudgetReport(r.rateBudgets)}\n`);
  for (const w of r.webhooks.filter((h) => h.problems.length > 0)) {
    lines.push(
      `WEBHOOK ${w.id}: ${w.problems.join(', ')}${w.missingEvents.length > 0 ? ` (missing ${w.missingEvents.join(', ')})` : ''}\n`,
    );
  }
  return lines.join('');
}
