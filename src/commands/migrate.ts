/** `subscriber-mirror migrate`: applies the database migrations and exits. */
import { loadDatabaseUrl } from '../config.js';
import { runMigrations } from '../db/migrate.js';
import { parseOptions, type Command } from './args.js';
import { describeConnectionError } from './connection-error.js';

export const migrateCommand: Command = async (args) => {
  parseOptions(args, {});
  const databaseUrl = loadDatabaseUrl(process.env);
  try {
    const { applied } = await runMigrations(databaseUrl);
    process.stdout.write(applied > 0 ? `applied ${applied} migration(s)\n` : 'database is up to date\n');
    return 0;
  } catch (error) {
    throw new Error(`cannot migrate the database: ${describeConnectionError(error)}`);
  }
};
