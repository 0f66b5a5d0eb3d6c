/**
 * `subscriber-mirror status [--json] [--account NAME]`: per group × type the cursor, last run, rows,
 * drift and audit accuracy; the auth pause, the learned rate budgets and the webhooks' health. Of
 * the account named, or the only one; with several declared and none named, of every account, one
 * after the other (`--json`: `{"accounts": [...]}`, each as one account's answer).
 */
import type { Redis } from 'ioredis';
import { accountConfig, findAccount, loadConfig, NOTHING_RECONCILES, readCredentialOf, type Config } from '../config.js';
import { openDatabase } from '../db/client.js';
import { formatBudgetReport, readRateBudgets, type BudgetReport } from '../ratelimit/budget-limiter.js';
import { authPauseKey, isPaused, readAuthPause, type AuthPause } from '../sync/auth-pause.js';
import { auditScheduleNotice, collectStatus, formatStatusTable, webhookHealth } from '../sync/status.js';
import { printable } from '../ground/terminal.js';
import { ACCOUNT_OPTION } from './account.js';
import { parseOptions, type Command } from './args.js';
import { configuredAuditSchedule } from './audit-settings.js';
import { describeConnectionError } from './connection-error.js';

/** Pass errors and auth messages quote the service: shown, never executed by the terminal. */
const out = (text: string) => process.stdout.write(printable(text));

/** One account's status, as `--json` prints it. */
interface AccountStatus {
  account: string;
  source: Config['sync']['source'] | null;
  notice?: string;
  authPause: AuthPause | null;
  rateBudgets: BudgetReport | null;
  audit: ReturnType<typeof configuredAuditSchedule>;
  passes: Awaited<ReturnType<typeof collectStatus>>;
  webhooks: Awaited<ReturnType<typeof webhookHealth>>;
}

/** What Redis holds of account `config` (its pause, its learned budgets), when it reads from the service. */
async function redisFacts(config: Config, redis: () => Promise<Redis>): Promise<Pick<AccountStatus, 'authPause' | 'rateBudgets'>> {
  const credential = readCredentialOf(config);
  if (!credential) return { authPause: null, rateBudgets: null };
  const client = await redis();
  const pause = await readAuthPause(client, authPauseKey(config.redisPrefix, credential));
  return { authPause: isPaused(pause) ? pause : null, rateBudgets: await readRateBudgets(client, config.redisPrefix) };
}

/** Account `config`'s status, read on a pool serving it. */
async function accountStatus(config: Config, redis: () => Promise<Redis>): Promise<AccountStatus> {
  const database = openDatabase(config.databaseUrl, { max: 1, account: config.account });
  try {
    const audit = configuredAuditSchedule(config);
    const passes = await collectStatus(database.pool, { groups: config.sync.groups, types: config.sync.types, auditSchedule: audit });
    const webhooks = await webhookHealth(database.pool);
    const reads = config.sync.reconciles ? { source: config.sync.source } : { source: null, notice: NOTHING_RECONCILES };
    return { account: config.account, ...reads, ...(await redisFacts(config, redis)), audit, passes, webhooks };
  } finally {
    await database.close();
  }
}

function printText(status: AccountStatus, config: Config): void {
  if (status.notice) out(`${status.notice}\n\n`);
  const pause = status.authPause;
  if (pause) {
    out(`POLLING PAUSED until ${new Date(pause.until).toISOString()} after ${pause.failures} auth failure(s): ${pause.message}\n\n`);
  }
  out(status.passes.length > 0 ? `${formatStatusTable(status.passes)}\n` : 'no groups configured and no passes recorded yet\n');
  if (status.audit && !status.audit.honoured) out(`\n${auditScheduleNotice(status.audit, config.audit.budgetShare)}\n`);
  if (status.rateBudgets) out(`\n${formatBudgetReport(status.rateBudgets)}\n`);
  for (const w of status.webhooks.filter((h) => h.problems.length > 0)) {
    out(`WEBHOOK ${w.id}: ${w.problems.join(', ')}${w.missingEvents.length > 0 ? ` (missing ${w.missingEvents.join(', ')})` : ''}\n`);
  }
}

export const statusCommand: Command = async (args) => {
  const { values } = parseOptions(args, { json: { type: 'boolean', default: false }, ...ACCOUNT_OPTION });
  const config = loadConfig(process.env, ['database']);
  const every = values.account === undefined && config.accounts.length > 1;
  const names = every ? config.accounts.map((a) => a.name) : [findAccount(config, values.account).name];
  let client: Redis | null = null;
  const redis = async (): Promise<Redis> => {
    if (client) return client;
    const { Redis } = await import('ioredis');
    client = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
    await client.connect();
    return client;
  };
  try {
    const statuses: AccountStatus[] = [];
    for (const name of names) statuses.push(await accountStatus(accountConfig(config, name), redis));
    if (values.json) {
      out(`${JSON.stringify(every ? { accounts: statuses } : statuses[0], null, 2)}\n`);
      return 0;
    }
    statuses.forEach((status, i) => {
      if (every) out(`${i > 0 ? '\n' : ''}== account ${status.account} ==\n`);
      printText(status, accountConfig(config, status.account));
    });
    return 0;
  } catch (error) {
    throw new Error(`cannot read status: ${describeConnectionError(error)}`);
  } finally {
    (client as Redis | null)?.disconnect();
  }
};
