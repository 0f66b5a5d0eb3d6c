/**
 * `subscriber-mirror erase --email E | --id I` (docs/operations.md, "Erasing a person"): an operator
 * answering a data-subject request erases that person's personal data from the mirror now, the same
 * erasure the service's forget brings. It erases the mirror's copy, not the service's data: the
 * service's own forget does that (and its delivery would erase the mirror's copy in turn).
 *
 * Bad input (neither or both options, a malformed email, an id the mirror does not know) exits 2
 * and changes nothing; an email nobody in the mirror has any more is "nothing left to erase" (exit
 * 0): emails are not kept once erased, so it cannot be told from one never mirrored.
 */
import { openDatabase } from '../db/client.js';
import { UsageError } from '../ground/usage-error.js';
import { mirroredSubscribers, subscribersWithEmail } from '../mirror/erasure.js';
import { canonicalIdOrNull } from '../mirror/rules.js';
import { eraseNow, type RequestedErasure } from '../webhooks/erasure-run.js';
import { anyDeliveryMentions, subscribersWithEmailInDeliveries } from '../webhooks/inbox/erasure.js';
import { ACCOUNT_OPTION, loadAccountConfig } from './account.js';
import { parseOptions, type Command } from './args.js';
import { describeConnectionError } from './connection-error.js';
import type { Queryable } from '../ground/queryable.js';

export const ERASE_USAGE = 'usage: subscriber-mirror erase --email EMAIL | --id ID [--account NAME]';

export type EraseTarget = ({ email: string } | { id: string }) & { account?: string };

/** An address as the service stores one: one `@`, no space or control character, at most 254 characters. */
const EMAIL = /^[^\s@\p{Cc}]+@[^\s@\p{Cc}]+\.[^\s@\p{Cc}]+$/u;

/** The options → what to erase, or a UsageError (exit 2) before anything is read. */
export function parseEraseArgs(args: string[]): EraseTarget {
  const { values } = parseOptions(args, { email: { type: 'string' }, id: { type: 'string' }, ...ACCOUNT_OPTION });
  const account = values.account === undefined ? {} : { account: values.account };
  if ((values.email === undefined) === (values.id === undefined)) {
    throw new UsageError(`erase needs exactly one of --email or --id\n${ERASE_USAGE}`, { printUsage: false });
  }
  if (values.email !== undefined) {
    const email = values.email.trim();
    if (email.length > 254 || !EMAIL.test(email)) {
      throw new UsageError(`erase: --email "${values.email}" is not an email address; nothing changed`, { printUsage: false });
    }
    return { email, ...account };
  }
  const id = canonicalIdOrNull(values.id);
  if (id === null)
    throw new UsageError(`erase: --id "${values.id}" is not a subscriber id (digits); nothing changed`, { printUsage: false });
  return { id, ...account };
}

/** The subscriber ids to erase; an unknown id is a UsageError. */
async function resolve(pool: Queryable, target: EraseTarget): Promise<string[]> {
  if ('email' in target) {
    const ids = new Set([
      ...(await subscribersWithEmail(pool, target.email)),
      ...(await subscribersWithEmailInDeliveries(pool, target.email)),
    ]);
    return [...ids].sort();
  }
  const known = (await mirroredSubscribers(pool, [target.id])).length > 0 || (await anyDeliveryMentions(pool, [target.id]));
  if (!known) {
    throw new UsageError(
      `erase: no subscriber ${target.id} in the mirror (not in subscribers nor in any stored delivery); nothing changed`,
      {
        printUsage: false,
      },
    );
  }
  return [target.id];
}

/** What was done, one line per table that changed. */
export function formatErasure(target: EraseTarget, ids: readonly string[], result: RequestedErasure): string {
  const who =
    'email' in target ? `${target.email} (subscriber${ids.length === 1 ? '' : 's'} ${ids.join(', ')})` : `subscriber ${target.id}`;
  const changed = result.subscribers + result.versions + result.activityLinks + result.deliveries + result.logged.length;
  if (changed === 0) return `nothing left to erase for ${who}: already erased`;
  return [
    `erased ${who} from the mirror (the service's own data is not touched):`,
    `  subscribers              ${result.subscribers} row(s) emptied`,
    `  subscriber_versions_past ${result.versions} version(s) emptied`,
    `  subscriber_activity      ${result.activityLinks} link(s) cut`,
    `  webhook_deliveries       ${result.deliveries} body(ies) redacted`,
    `  erasures                 ${result.logged.length} id(s) logged (reason request)`,
  ].join('\n');
}

export const eraseCommand: Command = async (args) => {
  const target = parseEraseArgs(args);
  // Erasure stays within its account: the one named, or the only one.
  const config = loadAccountConfig(process.env, ['database'], target.account);
  const database = openDatabase(config.databaseUrl, { max: 1, account: config.account });
  try {
    const ids = await resolve(database.pool, target).catch((error: unknown) => {
      if (error instanceof UsageError) throw error;
      throw new Error(`cannot read the mirror: ${describeConnectionError(error)}`);
    });
    if (ids.length === 0 && 'email' in target) {
      process.stdout.write(
        `nothing left to erase for ${target.email}: no subscriber in the mirror has it (erased already, or never mirrored)\n`,
      );
      return 0;
    }
    const result = await eraseNow(database.pool, ids, 'email' in target ? [target.email] : []);
    process.stdout.write(`${formatErasure(target, ids, result)}\n`);
    return 0;
  } finally {
    await database.close();
  }
};
