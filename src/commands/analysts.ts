/**
 * `subscriber-mirror analysts list | limit ROLE --account A[,B] | unlimit ROLE`: which accounts an
 * analyst's login may read (docs/sql.md, "Roles"). A limit holds through every table, view and
 * function by row-level security (migration 0030); a login without one reads every account.
 */
import { parseArgs } from 'node:util';
import { loadConfig } from '../config.js';
import { openDatabase } from '../db/client.js';
import { limitAnalyst, listAnalystLimits, unlimitAnalyst } from '../db/analyst-accounts.js';
import { printable } from '../ground/terminal.js';
import { UsageError } from '../ground/usage-error.js';
import type { Command } from './args.js';

const USAGE = 'usage: subscriber-mirror analysts list | limit ROLE --account A[,B...] | unlimit ROLE';

const out = (text: string) => process.stdout.write(printable(text));

function parse(args: string[]): { action: string; role: string | undefined; accounts: string[] } {
  let parsed;
  try {
    parsed = parseArgs({ args, options: { account: { type: 'string' } }, strict: true, allowPositionals: true });
  } catch (error) {
    throw new UsageError(`${(error as Error).message}\n${USAGE}`, { printUsage: false });
  }
  const [action, role, ...extra] = parsed.positionals;
  const accounts = (parsed.values.account ?? '')
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== '');
  const wantsRole = action === 'limit' || action === 'unlimit';
  if (!action || !['list', 'limit', 'unlimit'].includes(action) || extra.length > 0 || wantsRole !== (role !== undefined)) {
    throw new UsageError(USAGE, { printUsage: false });
  }
  if (action === 'limit' && accounts.length === 0) throw new UsageError(`limit needs --account\n${USAGE}`, { printUsage: false });
  if (action !== 'limit' && accounts.length > 0) throw new UsageError(`--account belongs to limit only\n${USAGE}`, { printUsage: false });
  return { action, role, accounts };
}

export const analystsCommand: Command = async (args) => {
  const { action, role, accounts } = parse(args);
  const config = loadConfig(process.env, ['database']);
  // Deployment-wide: the limits name accounts themselves.
  const database = openDatabase(config.databaseUrl, { max: 1 });
  try {
    if (action === 'limit' && role) {
      await limitAnalyst(database.pool, role, accounts);
      out(`${role} now reads accounts ${accounts.join(', ')} only\n`);
    } else if (action === 'unlimit' && role) {
      const lifted = await unlimitAnalyst(database.pool, role);
      out(lifted > 0 ? `${role} reads every account again\n` : `${role} had no limit: it reads every account\n`);
    } else {
      const limits = await listAnalystLimits(database.pool);
      if (limits.length === 0) out('no analyst is limited: every analyst login reads every account\n');
      for (const l of limits) out(`${l.role}  ${l.accounts.join(', ')}\n`);
    }
    return 0;
  } finally {
    await database.close();
  }
};
