/**
 * The SQL twins of erasure's JavaScript rules agree with them (docs/security.md, "Personal data and
 * erasure"): an id found in a stored body is read as the normalizer reads it (`idRule`), and a link is
 * cut the same way in `subscriber_activity` (SQL) as in the stored bodies (JavaScript).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalIdOrNull, canonicalIdSql } from '../../src/mirror/rules.js';
import { linkWithoutPersonalData, linkWithoutPersonalDataSql } from '../../src/mirror/personal-data.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { ID_SPELLINGS, LINK_CASES } from '../helpers/erasure-cases.js';

describe('erasure rules in SQL and in JavaScript', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('reads every id spelling as the normalizer does', async () => {
    const { rows } = await db.pool.query<{ id: string | null }>(
      `select ${canonicalIdSql('x')} as id from unnest($1::text[]) with ordinality as t(x, n) order by n`,
      [ID_SPELLINGS],
    );
    expect(rows.map((r) => r.id)).toEqual(ID_SPELLINGS.map((spelling) => canonicalIdOrNull(spelling)));
    expect(rows.map((r) => r.id)).toContain('1261159647788771324');
  });

  it('cuts every link the same way', async () => {
    const links = LINK_CASES.map(([link]) => link);
    const { rows } = await db.pool.query<{ link: string }>(
      `select ${linkWithoutPersonalDataSql('x')} as link from unnest($1::text[]) with ordinality as t(x, n) order by n`,
      [links],
    );
    expect(rows.map((r) => r.link)).toEqual(links.map(linkWithoutPersonalData));
    expect(rows.map((r) => r.link)).toEqual(LINK_CASES.map(([, expected]) => expected));
  });
});
