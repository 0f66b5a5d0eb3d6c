/** `subscriber-mirror webhooks replay [--status failed|ignored] [--since DATE] [--account NAME]`. */
import { findAccount, loadConfig } from '../config.js';
import { openDatabase } from '../db/client.js';
import { UsageError } from '../ground/usage-error.js';
import { replayDeliveries } from '../webhooks/replay.js';
import { parseOptions, type Command } from './args.js';

/**
 * `webhooks replay`: one account's stored deliveries back to pending (the one `--account` names, or
 * the only one); the update notifies the running workers (drizzle/0028_inbox_notify.sql).
 */
export const replayCommand: Command = async (args) => {
  const { values } = parseOptions(args, {
    status: { type: 'string', default: 'failed' },
    since: { type: 'string' },
    account: { type: 'string' },
  });
  if (values.status !== 'failed' && values.status !== 'ignored') {
    throw new UsageError(`--status must be failed or ignored, got "${values.status}"`);
  }
  if (values.since !== undefined && !/^\d{4}-\d{2}-\d{2}([T ][\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(values.since)) {
    throw new UsageError(`--since must be a date like 2026-01-31 or an ISO 8601 instant, got "${values.since}"`);
  }
  if (values.since !== undefined && Number.isNaN(Date.parse(values.since))) {
    throw new UsageError(`--since is not a real date: "${values.since}"`);
  }
  const config = loadConfig(process.env, ['database']);
  const account = findAccount(config, values.account).name;
  const database = openDatabase(config.databaseUrl, { max: 2, account });
  try {
    const since = values.since === undefined ? undefined : new Date(Date.parse(values.since)).toISOString();
    const ids = await replayDeliveries(database.pool, { status: values.status, ...(since ? { since } : {}) });
    const of = config.accounts.length > 1 ? ` of account ${account}` : '';
    process.stdout.write(
      ids.length > 0
        ? `replaying ${ids.length} ${values.status} deliveries${of} (a running worker applies them)\n`
        : `no ${values.status} deliveries${of} to replay\n`,
    );
    return 0;
  } finally {
    await database.close();
  }
};
