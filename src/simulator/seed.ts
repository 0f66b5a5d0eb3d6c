/**
 * Seeding: fills the column table with N plausible subscribers spread over G groups. Numbers only
 * (personal data is derived later from the slot), so a million subscribers seed in about a second.
 */
import { pickWeighted } from './prng.js';
import type { Rng } from './prng.js';
import { SUBSCRIBER_TYPES } from './kinds.js';
import type { SubscriberTable } from './table.js';

export const SOURCES = ['api', 'import', 'webform', 'manual', 'ecommerce'] as const;

const DAY_US = 86_400_000_000;
const HOUR_US = 3_600_000_000;
/** active, unsubscribed, bounced, junk, unconfirmed: a typical list is mostly active. */
export const TYPE_WEIGHTS: readonly number[] = [70, 12, 6, 4, 8];
const SECOND_GROUP_PROBABILITY = 0.25;

const UNSUBSCRIBED = SUBSCRIBER_TYPES.indexOf('unsubscribed');
const UNCONFIRMED = SUBSCRIBER_TYPES.indexOf('unconfirmed');

/**
 * Writes slots [first, first+n) and returns the newest updated_at written. The first 5·G slots
 * cycle through every (group, type) pair so small worlds still have all five types in each group.
 */
export function seedSubscribers(
  table: SubscriberTable,
  n: number,
  groupCount: number,
  rng: Rng,
  nowUs: number,
  typeWeights: readonly number[] = TYPE_WEIGHTS,
): number {
  const first = table.allocate(n);
  const covering = groupCount * SUBSCRIBER_TYPES.length;
  let newest = 0;
  for (let i = 0; i < n; i++) {
    const slot = first + i;
    const status = i < covering ? Math.floor(i / groupCount) : pickWeighted(rng, typeWeights);
    table.status[slot] = status;
    seedMembership(table, slot, i < covering ? i % groupCount : Math.floor(rng() * groupCount), groupCount, rng);
    newest = Math.max(newest, seedTimes(table, slot, status, rng, nowUs));
    seedCounters(table, slot, rng);
  }
  return newest;
}

function seedMembership(table: SubscriberTable, slot: number, group: number, groupCount: number, rng: Rng): void {
  table.setMember(group, slot, true);
  if (groupCount > 1 && rng() < SECOND_GROUP_PROBABILITY) {
    const other = (group + 1 + Math.floor(rng() * (groupCount - 1))) % groupCount;
    table.setMember(other, slot, true);
  }
}

function seedTimes(table: SubscriberTable, slot: number, status: number, rng: Rng, nowUs: number): number {
  const created = Math.floor(nowUs - DAY_US - rng() * 400 * DAY_US);
  const subscribed = status === UNCONFIRMED ? NaN : Math.floor(created + rng() * HOUR_US);
  const optedIn = status !== UNCONFIRMED && rng() < 0.5 ? subscribed : NaN;
  const unsubscribed = status === UNSUBSCRIBED ? Math.floor(subscribed + rng() * (nowUs - HOUR_US - subscribed)) : NaN;
  const latest = Math.max(created, Number.isNaN(subscribed) ? 0 : subscribed, Number.isNaN(unsubscribed) ? 0 : unsubscribed);
  const updated = Math.floor(latest + rng() * (nowUs - latest) * 0.5);
  table.createdUs[slot] = created;
  table.subscribedUs[slot] = subscribed;
  table.optedInUs[slot] = optedIn;
  table.unsubscribedUs[slot] = unsubscribed;
  table.updatedUs[slot] = updated;
  return updated;
}

function seedCounters(table: SubscriberTable, slot: number, rng: Rng): void {
  const sent = Math.floor(rng() * 40);
  const opens = Math.floor(sent * rng() * 0.6);
  table.sent[slot] = sent;
  table.opens[slot] = opens;
  table.clicks[slot] = Math.floor(opens * rng() * 0.5);
  table.source[slot] = Math.floor(rng() * SOURCES.length);
  table.countryId[slot] = 1 + Math.floor(rng() * 250);
  const ip = rng() < 0.8 ? 1 + Math.floor(rng() * 0xfffffffe) : 0;
  table.ip[slot] = ip;
  table.optinIp[slot] = Number.isNaN(table.optedInUs[slot] ?? NaN) ? 0 : ip;
  table.flags[slot] = 0;
}
