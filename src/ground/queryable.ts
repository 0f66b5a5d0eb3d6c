/**
 * The one executor type of the project: what runs a statement. A `pg.Pool` (each call its own
 * transaction), a `pg.PoolClient` / `pg.Client` (inside whatever transaction is open on it), or a
 * fake in unit tests. A `{name, text, values}` config makes a named prepared statement, planned once
 * per connection.
 */
export interface QueryConfig {
  name?: string;
  text: string;
  values?: unknown[];
}

export interface Queryable {
  query<R extends object = Record<string, unknown>>(
    query: string | QueryConfig,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}
