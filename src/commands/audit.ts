/**
 * `subscriber-mirror audit [--group G] [--type T] [--json] [--verify] [--account NAME]`: one audit of
 * one account now (docs/operations.md, "The audit"), whatever AUDIT_EVERY says, printing what it
 * found and repaired.
 * With `--verify`, then whether the mirror equals the service after the repair: exit 3 and what
 * differs when it does not (for cron and CI). Ids only: no personal data.
 */
import { Redis } from 'ioredis';
import { auditSettings } from './audit-settings.js';
import { auditLoopDeps } from './audit-run.js';
import type { Config } from '../config.js';
import { openDatabase } from '../db/client.js';
import { createLogger } from '../ground/log.js';
import { runAuditTick, type TickOutcome } from '../audit/loop.js';
import { formatVerdict, verifyTick, type Verdict } from '../audit/verify.js';
import type { PairAudit } from '../audit/pair.js';
import { createSyncQueue } from '../sync/schedule.js';
import { followSharedLimiter } from './reads.js';
import type { SubscriberType } from '../db/schema.js';
import { printable } from '../ground/terminal.js';
import { UsageError } from '../ground/usage-error.js';
import { ACCOUNT_OPTION, accountVariable, loadAccountConfig, ofAccount } from './account.js';
import { parseOptions, type Command } from './args.js';

function ids(list: readonly string[]): string {
  if (list.length === 0) return '';
  const shown = list.slice(0, 10).join(', ');
  return list.length > 10 ? `${shown} … (${list.length})` : shown;
}

function pairLines(a: PairAudit): string[] {
  const t = a.tally;
  const lines = [
    `group ${a.groupId} ${a.type}: ${t.rowsChecked} rows checked, ${t.inFlight} in flight, ` +
      `${t.content} content, ${t.missing} missing, ${t.extra} extra, ${t.count} count mismatch(es); ` +
      `${t.repaired} repaired, ${t.unrepaired} not repaired; service count ${a.serviceCount}`,
  ];
  if (a.ids.content.length > 0) lines.push(`  content rewritten: ${ids(a.ids.content)}`);
  if (a.ids.missing.length > 0) lines.push(`  missing added: ${ids(a.ids.missing)}`);
  if (a.ids.extra.length > 0) lines.push(`  extra (not listed by the service): ${ids(a.ids.extra)}`);
  if (a.countGap !== null) lines.push(`  count gap no stamped change explains: ${a.countGap}`);
  if (a.fullPassJob !== null) lines.push(`  full pass with removal proof asked (job ${a.fullPassJob})`);
  if (a.ids.unrepaired.length > 0) lines.push(`  persisting after a repair: ${ids(a.ids.unrepaired)}`);
  return lines;
}

export function formatAuditOutcome(outcome: TickOutcome): string {
  const lines = outcome.audits.flatMap(pairLines);
  for (const s of outcome.skipped) lines.push(`group ${s.groupId} ${s.type}: skipped (${s.reason})`);
  for (const f of outcome.failed) lines.push(`group ${f.groupId} ${f.type}: failed: ${f.error}`);
  for (const w of outcome.webhooks ?? []) {
    lines.push(
      `webhook ${w.id}: ${w.problems.length === 0 ? 'ok' : w.problems.join(', ')}${w.missingEvents.length ? ` (${w.missingEvents.join(', ')})` : ''}`,
    );
  }
  lines.push(`${outcome.requests} request(s) to the service`);
  return lines.join('\n');
}

/** `audit --verify`'s exit code when the mirror differs from the service after repair (1 stays "the audit failed"). */
export const VERIFY_DIFFERS_EXIT = 3;

/** `config`: the account's (`accountConfig`): its pool, its queue and its limiter are that account's. */
export async function runAuditCli(
  config: Config,
  target: { groupId?: string; type?: SubscriberType },
  json: boolean,
  verify = false,
): Promise<number> {
  const settings = auditSettings(config);
  const database = openDatabase(config.databaseUrl, { max: 2, account: config.account });
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
  const queue = createSyncQueue({ url: config.redisUrl, maxRetriesPerRequest: 1 }, config.redisPrefix);
  const limiter = followSharedLimiter(config);
  try {
    await redis.connect();
    const logger = createLogger({ level: 'silent' }).logger;
    const deps = auditLoopDeps({ config, settings, pool: database.pool, redis, limiter, queue, logger }, settings.everyMs ?? 15 * 60_000);
    const startedAt = Date.now();
    const outcome = await runAuditTick(deps, { force: true, ...target });
    const verdict: Verdict | null = verify ? await verifyTick(database.pool, outcome, startedAt, deps.askFullPass) : null;
    if (json) process.stdout.write(printable(`${JSON.stringify(verdict ? { ...outcome, verify: verdict } : outcome, null, 2)}\n`));
    else process.stdout.write(printable(`${formatAuditOutcome(outcome)}${verdict ? `\n${formatVerdict(verdict)}` : ''}\n`));
    if (outcome.failed.length > 0) return 1;
    return verdict && !verdict.exact ? VERIFY_DIFFERS_EXIT : 0;
  } finally {
    await limiter.close();
    await queue.close();
    redis.disconnect();
    await database.close();
  }
}

/** `audit [--group G] [--type T] [--json] [--verify] [--account NAME]`: one audit of an account's configured pairs (or one group / type) now. */
export const auditCommand: Command = async (args) => {
  const { values } = parseOptions(args, {
    group: { type: 'string' },
    type: { type: 'string' },
    json: { type: 'boolean', default: false },
    verify: { type: 'boolean', default: false },
    ...ACCOUNT_OPTION,
  });
  const config = loadAccountConfig(process.env, ['poll'], values.account);
  if (values.group !== undefined && !config.sync.groups.includes(values.group)) {
    throw new UsageError(
      `--group ${values.group} is not configured${ofAccount(config)}; configured groups (${accountVariable(config.account, 'SYNC_GROUPS')}): ${config.sync.groups.join(', ') || 'none'}`,
    );
  }
  if (values.type !== undefined && !(config.sync.types as readonly string[]).includes(values.type)) {
    throw new UsageError(
      `--type must be one of the configured types (${accountVariable(config.account, 'SYNC_TYPES')}): ${config.sync.types.join(', ')}, got "${values.type}"`,
    );
  }
  const target = { ...(values.group ? { groupId: values.group } : {}), ...(values.type ? { type: values.type as SubscriberType } : {}) };
  return runAuditCli(config, target, values.json, values.verify);
};
