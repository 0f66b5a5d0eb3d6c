/**
 * The page gate on real reads (legacy client, injected fetch): a body is read only with a room,
 * the room goes with the page to its consumer, and nothing a pass leaves behind keeps one.
 */
import { describe, expect, it } from 'vitest';
import { createLegacyClient, type LegacyPage } from '../../src/upstream/legacy/client.js';
import { admissionOf, createPageGate, type PageGate } from '../../src/upstream/page-gate.js';
import { readAhead } from '../../src/sync/legacy-pass.js';

/** The body of a legacy list page holding rows `from` (included) to `to` (excluded). */
function listBody(from: number, to: number): string {
  const rows = [];
  for (let i = from; i < to; i++) rows.push(`{"id":${1_000_000 + i},"email":"s${i}@x.test"}`);
  return `[${rows.join(',')}]`;
}

/** A legacy list of `total` rows per type; `broken` types answer 200 with a body that is not a list. */
function legacy(total: number, broken: readonly string[] = []) {
  const fetchImpl = (async (input: string | URL | Request) => {
    const url = new URL(String(input));
    if (broken.some((t) => url.pathname.endsWith(`/${t}`))) return new Response('{"oops":1}', { status: 200 });
    const limit = Number(url.searchParams.get('limit'));
    const offset = Number(url.searchParams.get('offset'));
    const body = listBody(offset, Math.min(total, offset + limit));
    // Sized like a real answer: the gate weighs each account's pages by their Content-Length.
    return new Response(body, { status: 200, headers: { 'content-length': String(Buffer.byteLength(body)) } });
  }) as typeof fetch;
  return createLegacyClient({
    baseUrl: 'http://legacy.test',
    apiKey: 'legacy-key-0a9b8c7d6e',
    http: { fetch: fetchImpl, retry: { retries: 0 } },
  });
}

/** Reads one type's full list as a pass does (read-ahead), "committing" each page after a tick. */
async function pass(gate: PageGate, type: 'active' | 'junk' | 'bounced', seen: number[]): Promise<number> {
  const memory = admissionOf(gate);
  let rows = 0;
  try {
    const pages = legacy(50).pages('7', { type, limit: 10, mode: 'full', knownLength: 50, memory });
    for await (const page of readAhead(pages)) {
      seen.push(gate.stats().held);
      rows += page.rows.length;
      await new Promise((resolve) => setTimeout(resolve, 2));
      page.release?.();
    }
  } finally {
    memory.close();
  }
  return rows;
}

describe('page gate on legacy reads', () => {
  it('three passes side by side never hold more pages than its rooms, and read every row', async () => {
    const gate = createPageGate(1);
    const seen: number[] = [];
    const rows = await Promise.all([pass(gate, 'active', seen), pass(gate, 'junk', seen), pass(gate, 'bounced', seen)]);
    expect(rows).toEqual([50, 50, 50]);
    expect(seen.length).toBeGreaterThanOrEqual(15);
    expect(Math.max(...seen)).toBe(1);
    expect(gate.stats()).toEqual({ capacity: 1, held: 0, waiting: 0 });
  });

  it('a page handed over keeps its room until the consumer releases it', async () => {
    const gate = createPageGate(2);
    const pages = legacy(50).pages('7', { type: 'active', limit: 10, mode: 'full', knownLength: 50, memory: admissionOf(gate) });
    const first = (await pages.next()).value as LegacyPage;
    expect(gate.stats().held).toBe(1);
    first.release?.();
    expect(gate.stats().held).toBe(0);
    await pages.return(undefined);
  });

  it('a read-ahead page a stop left uncommitted holds its room until the pass closes its admission', async () => {
    const gate = createPageGate(2);
    const memory = admissionOf(gate);
    const pages = legacy(50).pages('7', { type: 'active', limit: 10, mode: 'full', knownLength: 50, memory });
    for await (const page of readAhead(pages)) {
      page.release?.();
      break; // a stop after the first commit: the second page was already read
    }
    expect(gate.stats().held).toBe(1);
    memory.close();
    expect(gate.stats().held).toBe(0);
  });

  it('a body refused as a list frees its room at once', async () => {
    const gate = createPageGate(1);
    const pages = legacy(50, ['junk']).pages('7', { type: 'junk', limit: 10, mode: 'full', knownLength: 50, memory: admissionOf(gate) });
    await expect(pages.next()).rejects.toThrow(/junk/);
    expect(gate.stats()).toEqual({ capacity: 1, held: 0, waiting: 0 });
  });

  it("asks for each room with the body's Content-Length, before the body is read", async () => {
    const gate = createPageGate(2);
    const asked: Array<number | null | undefined> = [];
    const weighing: PageGate = { ...gate, admit: (bytes) => (asked.push(bytes), gate.admit(bytes)) };
    const pages = legacy(15).pages('7', { type: 'active', limit: 10, mode: 'full', knownLength: 15, memory: admissionOf(weighing) });
    for await (const page of pages) page.release?.();
    expect(asked[0]).toBe(Buffer.byteLength(listBody(0, 10)));
    expect(asked.length).toBeGreaterThanOrEqual(2);
    expect(asked.every((bytes) => typeof bytes === 'number' && bytes > 0)).toBe(true);
  });
});
