/**
 * withRetriedTransaction: a unit of work Postgres ends as a deadlock victim (or a serialization
 * failure) runs again in a new transaction; any other error, or the last attempt's, is thrown.
 */
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { withRetriedTransaction } from '../../src/mirror/store/executor.js';

/** A pool whose one client records the statements it is given. */
function fakePool(statements: string[]): pg.Pool {
  const client = {
    query: async (text: string) => {
      statements.push(text);
      return { rows: [], rowCount: 0 };
    },
    release: () => {},
  };
  return { connect: async () => client } as unknown as pg.Pool;
}

const failure = (code: string) => Object.assign(new Error(`failed with ${code}`), { code });

describe('withRetriedTransaction', () => {
  it('runs a deadlock victim again in a new transaction and returns its result', async () => {
    const statements: string[] = [];
    let calls = 0;
    const result = await withRetriedTransaction(fakePool(statements), async () => {
      calls += 1;
      if (calls === 1) throw failure('40P01');
      return 'done';
    });
    expect(result).toBe('done');
    expect(calls).toBe(2);
    expect(statements).toEqual(['begin', 'rollback', 'begin', 'commit']);
  });

  it('gives up after the last attempt, with the error', async () => {
    let calls = 0;
    const attempt = withRetriedTransaction(
      fakePool([]),
      async () => {
        calls += 1;
        throw failure('40001');
      },
      3,
    );
    await expect(attempt).rejects.toThrow('failed with 40001');
    expect(calls).toBe(3);
  });

  it('never repeats any other failure', async () => {
    let calls = 0;
    await expect(
      withRetriedTransaction(fakePool([]), async () => {
        calls += 1;
        throw failure('23505');
      }),
    ).rejects.toThrow('failed with 23505');
    expect(calls).toBe(1);
  });
});
