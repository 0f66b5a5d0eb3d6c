/**
 * `COPY … FROM STDIN` on a plain node-postgres client, without pg-copy-streams.
 *
 * node-postgres runs any object with a `submit(connection)` method as a query ("submittable") and
 * forwards the protocol messages to it; pg-copy-streams is built the same way. This minimal version
 * sends pre-encoded chunks and resolves with the row count from `CommandComplete`. It buffers every
 * chunk in the socket at once, which is fine for a benchmark, not for production streaming.
 */
import type pg from 'pg';
import type { SubscriberKeyOfRole } from '../../../src/db/schema.js';
import { SUBSCRIBER_TABLE_COLUMNS, type SubscriberField } from '../../../src/db/subscriber-columns.js';
import type { SubscriberRow } from '../../../src/mirror/normalize.js';
import { versionTime } from '../../../src/mirror/version.js';

interface CopyConnection {
  query(text: string): void;
  sendCopyFromChunk(chunk: Buffer): void;
  endCopyFrom(): void;
}

class CopyFromStdin {
  readonly promise: Promise<number>;
  private resolve!: (rows: number) => void;
  private reject!: (err: Error) => void;
  private rows = 0;

  constructor(
    private readonly text: string,
    private readonly chunks: readonly Buffer[],
  ) {
    this.promise = new Promise<number>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  submit(connection: CopyConnection): void {
    connection.query(this.text);
  }

  handleCopyInResponse(connection: CopyConnection): void {
    for (const chunk of this.chunks) connection.sendCopyFromChunk(chunk);
    connection.endCopyFrom();
  }

  handleCommandComplete(msg: { text?: string }): void {
    this.rows = Number(/^COPY (\d+)/.exec(msg.text ?? '')?.[1] ?? 0);
  }

  handleReadyForQuery(): void {
    this.resolve(this.rows);
  }

  handleError(err: Error): void {
    this.reject(err);
  }

  // Not expected for COPY FROM; present so an odd server reply cannot crash the client.
  handleRowDescription(): void {}
  handleDataRow(): void {}
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyData(): void {}
}

/** Runs `COPY <table> (<columns>) FROM STDIN` (text format) with `chunks` as the data; returns rows copied. */
export async function copyFromStdin(client: pg.ClientBase, text: string, chunks: readonly Buffer[]): Promise<number> {
  const copy = new CopyFromStdin(text, chunks);
  (client as unknown as { query(q: CopyFromStdin): unknown }).query(copy);
  return copy.promise;
}

/** One value in COPY text format. */
export function copyValue(value: unknown): string {
  if (value === null || value === undefined) return '\\N';
  const text = typeof value === 'string' ? value : typeof value === 'object' ? JSON.stringify(value) : String(value);
  return /[\\\t\n\r]/.test(text) ? text.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r') : text;
}

/** Encodes rows (arrays of values) as COPY text-format lines. */
export function copyRows(rows: readonly (readonly unknown[])[]): Buffer {
  let out = '';
  for (const row of rows) out += `${row.map(copyValue).join('\t')}\n`;
  return Buffer.from(out, 'utf8');
}

// ---------------------------------------------------------------------------------------------
// `subscribers` rows as COPY data, every column from the registry (src/db/schema.ts)

/** Columns of `subscribers` that are not upstream data: how a benchmark fills each one. */
const OWN_COLUMNS: Record<SubscriberKeyOfRole<'key' | 'version' | 'bookkeeping'>, (row: SubscriberRow, now: string) => unknown> = {
  id: (row) => row.values.id,
  versionAt: (row) => versionTime(row.values),
  mirroredAt: (_row, now) => now,
  mirroredVia: (row) => row.via,
};

/** One row's values in `SUBSCRIBER_COLUMN_NAMES` order, every column (`now` is `mirrored_at`): a COPY writing what the store writes. */
export function subscriberCopyTuple(row: SubscriberRow, now: string): unknown[] {
  return SUBSCRIBER_TABLE_COLUMNS.map((c) => {
    const own = (OWN_COLUMNS as Partial<Record<string, (row: SubscriberRow, now: string) => unknown>>)[c.field];
    return own ? own(row, now) : row.values[c.field as SubscriberField];
  });
}
