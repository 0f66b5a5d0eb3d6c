/**
 * `subscriber-mirror backfill (--group ID | --all) [--type T] [--wait] [--account NAME]`: enqueues full
 * passes of one account's configured groups and types on its queue, and with `--wait` follows each to
 * its end (docs/operations.md).
 */
import type { Config } from '../config.js';
import { SUBSCRIBER_TYPES, type SubscriberType } from '../db/schema.js';
import { printable } from '../ground/terminal.js';
import { UsageError } from '../ground/usage-error.js';
import { enqueueBackfills, waitForPass, type BackfillTarget } from '../sync/backfill.js';
import { createSyncQueue, type PassJobResult } from '../sync/schedule.js';
import { ACCOUNT_OPTION, accountVariable, loadAccountConfig, ofAccount } from './account.js';
import { parseOptions, type Command } from './args.js';

function backfillTargets(values: { group?: string; type?: string; all?: boolean }, config: Config): BackfillTarget[] {
  if (values.all && values.group) throw new UsageError('use either --group ID or --all, not both');
  if (!values.all && !values.group) throw new UsageError('backfill needs --group ID (or --all for every SYNC_GROUPS group)');
  if (values.group !== undefined && !/^\d{1,30}$/.test(values.group)) {
    throw new UsageError(`--group must be a numeric group id, got "${values.group}"`);
  }
  if (values.type !== undefined && !(SUBSCRIBER_TYPES as readonly string[]).includes(values.type)) {
    throw new UsageError(`--type must be one of ${SUBSCRIBER_TYPES.join(', ')}, got "${values.type}"`);
  }
  const groups = values.all ? config.sync.groups : [values.group as string];
  const groupsVariable = accountVariable(config.account, 'SYNC_GROUPS');
  if (groups.length === 0) throw new UsageError(`--all needs ${groupsVariable} to name at least one group`);
  // Only what the service is configured to mirror: a backfill must not pull in another group's people.
  if (values.group !== undefined && !config.sync.groups.includes(values.group)) {
    throw new UsageError(
      `--group ${values.group} is not configured${ofAccount(config)}; configured groups (${groupsVariable}): ${config.sync.groups.join(', ') || 'none'}`,
    );
  }
  if (values.type !== undefined && !(config.sync.types as readonly string[]).includes(values.type)) {
    throw new UsageError(
      `--type ${values.type} is not configured${ofAccount(config)}; configured types (${accountVariable(config.account, 'SYNC_TYPES')}): ${config.sync.types.join(', ')}`,
    );
  }
  const types: SubscriberType[] = values.type ? [values.type as SubscriberType] : [...config.sync.types];
  return groups.flatMap((groupId) => types.map((type) => ({ groupId, type })));
}

/** What a backfill's pass proved: members ended (with its confirming passes) and any still awaiting proof. */
function endedText(result: PassJobResult): string {
  if (result.removed === undefined) return '';
  const confirming = result.confirmingPasses
    ? ` after ${result.confirmingPasses} confirming pass${result.confirmingPasses > 1 ? 'es' : ''}`
    : '';
  const awaiting = result.awaitingProof ? `; ${result.awaitingProof} still awaiting proof (the next full pass confirms)` : '';
  return `, ${result.removed} member${result.removed === 1 ? '' : 's'} ended${confirming}${awaiting}`;
}

export const backfillCommand: Command = async (args) => {
  const { values } = parseOptions(args, {
    group: { type: 'string' },
    type: { type: 'string' },
    all: { type: 'boolean', default: false },
    wait: { type: 'boolean', default: false },
    ...ACCOUNT_OPTION,
  });
  const config = loadAccountConfig(process.env, ['database'], values.account);
  const targets = backfillTargets(values, config);
  // The account's queue (its Redis prefix): its worker runs the passes, with its budget.
  const queue = createSyncQueue({ url: config.redisUrl, maxRetriesPerRequest: 1 }, config.redisPrefix);
  try {
    const jobs = await enqueueBackfills(queue, targets);
    for (const j of jobs) process.stdout.write(`queued full pass of group ${j.groupId} ${j.type}${ofAccount(config)} (job ${j.jobId})\n`);
    if (!values.wait) return 0;
    const { default: cliProgress } = await import('cli-progress');
    let failed = 0;
    for (const j of jobs) {
      const bar = new cliProgress.SingleBar(
        {
          format: `group ${j.groupId} ${j.type.padEnd(12)} [{bar}] {value}/{total} {state}`,
          hideCursor: true,
          noTTYOutput: true,
          notTTYSchedule: 5_000,
        },
        cliProgress.Presets.shades_classic,
      );
      bar.start(1, 0, { state: 'waiting' });
      const outcome = await waitForPass(queue, j.jobId, {
        onProgress: (p, state) => {
          const total = p?.total ?? Math.max(1, p?.rowsSeen ?? 0);
          bar.setTotal(Math.max(total, p?.rowsSeen ?? 0, 1));
          bar.update(p?.rowsSeen ?? 0, { state: state === 'waiting' || state === 'delayed' ? 'waiting for a worker' : state });
        },
      });
      bar.stop();
      if (outcome.state === 'completed') {
        process.stdout.write(
          `group ${j.groupId} ${j.type}: done, ${outcome.result.rowsSeen} rows read, ${outcome.result.rowsWritten} written${endedText(outcome.result)}\n`,
        );
      } else {
        failed += 1;
        process.stderr.write(`subscriber-mirror: group ${j.groupId} ${j.type}: pass failed: ${printable(outcome.error)}\n`);
      }
    }
    return failed > 0 ? 1 : 0;
  } finally {
    await queue.close();
  }
};
