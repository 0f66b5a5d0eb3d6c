/**
 * The lists the simulated APIs serve, scanned from the world's columns: the legacy API's (a group's
 * members of a type, date filters, insertion or `updated_at` order) and the current API's (ascending
 * id). Scans are cached per world version, so a full pass over 1M subscribers scans once, not once per
 * page.
 */
import { inRange, type SecondsRange } from './filters.js';
import { SUBSCRIBER_TYPES, type SubscriberType } from './kinds.js';
import { FLAG_DELETED, type SubscriberTable } from './table.js';

const LIST_CACHE_SIZE = 16;

export class ListScans {
  private readonly cache = new Map<string, { version: number; slots: Uint32Array }>();

  constructor(private readonly table: SubscriberTable) {}

  /** Slots the legacy API lists for a group, in response order, as of world `version`. */
  listSlots(
    version: number,
    groupIndex: number,
    type: SubscriberType | null,
    ranges: readonly SecondsRange[],
    byUpdated: boolean,
  ): Uint32Array {
    const key = `${groupIndex}|${type ?? '*'}|${byUpdated ? 'u' : 'h'}|${ranges.map((r) => `${r.key}:${r.fromSec}:${r.toSec}`).join(',')}`;
    return this.cached(key, version, () => scanMembers(this.table, groupIndex, type, ranges, byUpdated));
  }

  /** Slots the current API lists for a group and status, ascending by id (ids grow with the slot). */
  idOrderedSlots(version: number, groupIndex: number, type: SubscriberType): Uint32Array {
    return this.cached(`id|${groupIndex}|${type}`, version, () => this.listSlots(version, groupIndex, type, [], false).slice().sort());
  }

  private cached(key: string, version: number, scan: () => Uint32Array): Uint32Array {
    const hit = this.cache.get(key);
    if (hit && hit.version === version) return hit.slots;
    const slots = scan();
    this.cache.delete(key);
    if (this.cache.size >= LIST_CACHE_SIZE) {
      const oldest = this.cache.keys().next();
      if (!oldest.done) this.cache.delete(oldest.value);
    }
    this.cache.set(key, { version, slots });
    return slots;
  }
}

function scanMembers(
  t: SubscriberTable,
  groupIndex: number,
  type: SubscriberType | null,
  ranges: readonly SecondsRange[],
  byUpdated: boolean,
): Uint32Array {
  const bits = t.groupBits[groupIndex];
  if (!bits) return new Uint32Array(0);
  const code = type === null ? -1 : SUBSCRIBER_TYPES.indexOf(type);
  const columns = ranges.map((range) => filterColumn(t, range.key));
  // Two passes keep a 1M rescan (once per request under churn) cache-friendly: the sequential
  // pass reads the columns in slot order, the second walks list order over one byte per slot.
  const n = t.count;
  const matched = new Uint8Array(n);
  for (let slot = 0; slot < n; slot++) {
    if (((bits[slot >>> 5] ?? 0) & (1 << (slot & 31))) === 0) continue;
    if (((t.flags[slot] ?? 0) & FLAG_DELETED) !== 0) continue;
    if (code >= 0 && t.status[slot] !== code) continue;
    let matches = true;
    for (let r = 0; r < ranges.length && matches; r++) {
      const range = ranges[r];
      const us = columns[r]?.[slot] ?? NaN;
      matches = range !== undefined && inRange(range, Math.floor(us / 1e6));
    }
    if (matches) matched[slot] = 1;
  }
  const buffer = new Uint32Array(n);
  let found = 0;
  for (let k = 0; k < n; k++) {
    const slot = t.order[k] ?? 0;
    if (matched[slot] === 1) buffer[found++] = slot;
  }
  const out = buffer.slice(0, found);
  if (byUpdated) {
    // Ordering by updated_at makes an updated row jump to the end between two pages, which is
    // the offset-paging hazard the shiftingOrder option exists to exercise.
    return Uint32Array.from([...out].sort((a, b) => (t.updatedUs[a] ?? 0) - (t.updatedUs[b] ?? 0)));
  }
  return out;
}

function filterColumn(t: SubscriberTable, key: SecondsRange['key']): Float64Array {
  switch (key) {
    case 'date_subscribe':
      return t.subscribedUs;
    case 'date_unsubscribe':
      return t.unsubscribedUs;
    case 'date_created':
      return t.createdUs;
    case 'date_updated':
      return t.updatedUs;
  }
}
