/**
 * `subscriber-mirror fields [--refresh] [--json] [--account NAME]`: the custom field definitions the
 * mirror holds for one account (the columns of `subscriber_fields`, docs/sql.md, "Custom fields as
 * columns"). `--refresh` reads them from that account's service now, through its shared limiter,
 * and says what changed; a worker does the same every RECONCILE_EVERY.
 */
import { openDatabase } from '../db/client.js';
import { createLogger } from '../ground/log.js';
import type { Queryable } from '../ground/queryable.js';
import type { FieldChanges } from '../mirror/store/index.js';
import { refreshFields } from '../sync/fields.js';
import { ACCOUNT_OPTION, loadAccountConfig } from './account.js';
import { parseOptions, type Command } from './args.js';
import { fieldReader, followSharedLimiter } from './reads.js';
import { printable } from '../ground/terminal.js';

/** Field keys and titles are the service's strings: shown, never executed by the terminal. */
const out = (text: string) => process.stdout.write(printable(text));

interface StoredField {
  key: string;
  title: string | null;
  type: string;
}

async function storedFields(db: Queryable): Promise<StoredField[]> {
  const { rows } = await db.query<StoredField>('select key, title, type from fields where account = mirror_account() order by key');
  return rows;
}

function changeLines(c: FieldChanges): string[] {
  const lines: string[] = [];
  if (c.added.length > 0) lines.push(`added: ${c.added.join(', ')}`);
  for (const r of c.retyped) lines.push(`retyped: ${r.key} ${r.from} → ${r.to}`);
  if (c.removed.length > 0) lines.push(`removed: ${c.removed.join(', ')}`);
  if (c.retitled.length > 0) lines.push(`retitled: ${c.retitled.join(', ')}`);
  lines.push(c.rebuilt ? 'subscriber_fields rebuilt' : 'no column of subscriber_fields changed');
  return lines;
}

export const fieldsCommand: Command = async (args) => {
  const { values } = parseOptions(args, {
    refresh: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    ...ACCOUNT_OPTION,
  });
  const config = loadAccountConfig(process.env, values.refresh ? ['poll'] : ['database'], values.account);
  const database = openDatabase(config.databaseUrl, { max: 2, account: config.account });
  const limiter = values.refresh ? followSharedLimiter(config) : null;
  try {
    let changes: FieldChanges | null = null;
    if (limiter) {
      const logger = createLogger({ level: 'silent' }).logger;
      changes = await refreshFields(database.pool, fieldReader(config, limiter, logger), logger);
    }
    const fields = await storedFields(database.pool);
    if (values.json) {
      out(`${JSON.stringify({ ...(changes ? { changes } : {}), fields }, null, 2)}\n`);
      return 0;
    }
    if (changes) out(`${changeLines(changes).join('\n')}\n\n`);
    const width = Math.max(3, ...fields.map((f) => f.key.length));
    out(`${'key'.padEnd(width)}  type    title\n`);
    for (const f of fields) out(`${f.key.padEnd(width)}  ${f.type.padEnd(6)}  ${f.title ?? ''}\n`);
    if (fields.length === 0) out('(none yet: a worker reads them at start and every RECONCILE_EVERY; or run with --refresh)\n');
    return 0;
  } finally {
    await limiter?.close();
    await database.close();
  }
};
