import { DrizzleQueryError } from 'drizzle-orm/errors';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { describeConnectionError } from '../../src/commands/connection-error.js';

/** What Postgres raised in a migration (0012_least_privilege) when the receiver's role is missing. */
function missingRoleError(): pg.DatabaseError {
  const message =
    "role subscriber_mirror_receiver does not exist and mirror may not create it: as a superuser, run CREATE ROLE subscriber_mirror_receiver LOGIN PASSWORD '…'; then migrate again";
  const error = new pg.DatabaseError(message, message.length, 'error');
  error.code = 'P0001';
  return error;
}

describe('describeConnectionError', () => {
  it("prints Postgres's own message, not drizzle's 'Failed query' with the migration's SQL", () => {
    const sql = [
      'DO $$',
      'BEGIN',
      "  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'subscriber_mirror_receiver') THEN",
      '  END IF;',
      'END $$;',
    ].join('\n');
    const text = describeConnectionError(new DrizzleQueryError(sql, [], missingRoleError()));
    expect(text).toMatch(/^role subscriber_mirror_receiver does not exist and mirror may not create it: as a superuser, run CREATE ROLE/);
    expect(text).toMatch(/\(P0001\)$/);
    expect(text).not.toContain('Failed query');
    expect(text).not.toContain('pg_roles');
    expect(text.split('\n')).toHaveLength(1);
  });

  it('keeps errors without a cause as they were', () => {
    expect(describeConnectionError(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }))).toBe(
      'connect ECONNREFUSED 127.0.0.1:5432',
    );
    expect(describeConnectionError(Object.assign(new Error('password authentication failed for user "mirror"'), { code: '28P01' }))).toBe(
      'password authentication failed for user "mirror" (28P01)',
    );
  });
});
