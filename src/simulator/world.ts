/**
 * The simulated account: groups, subscribers, automations and campaigns, with every mutation of the
 * service. The lists its APIs serve are scanned in `scans.ts`, its wire shapes rendered in `wire.ts`. A mutation stamps the subscriber's updated_at (µs, never going backwards) and emits
 * the matching event (docs/upstream.md, "Event kinds") carrying the subscriber as it is after the change.
 */
import { ID_FAMILY, EMPTY_FIELDS, derivePerson, ipFromString, ipToString, sequenceId, subscriberIdScheme } from './identity.js';
import type { IdScheme } from './identity.js';
import { FIELD_KEYS, SUBSCRIBER_TYPES, isSubscriberType } from './kinds.js';
import type {
  AutomationInfo,
  CampaignInfo,
  EventKind,
  FieldDefinition,
  FieldType,
  GroupInfo,
  LegacySubscriber,
  SubscriberFields,
  SubscriberType,
  WebhookSubscriber,
  WorldEvent,
} from './kinds.js';
import type { SecondsRange } from './filters.js';
import { hash32, mulberry32 } from './prng.js';
import { ListScans } from './scans.js';
import { legacyJson } from './render.js';
import { SOURCES, TYPE_WEIGHTS, seedSubscribers } from './seed.js';
import { FLAG_DELETED, FLAG_FORGOTTEN, SubscriberTable } from './table.js';
import { formatLocalDate, formatLocalDateTime, isoMicros, parseZone } from './time.js';
import type { Zone } from './time.js';
import { currentSubscriber, legacySubscriber, webhookSubscriber, type SlotReader } from './wire.js';

function typeWeightsOf(weights: readonly number[] | undefined): readonly number[] {
  if (weights === undefined) return TYPE_WEIGHTS;
  const valid =
    weights.length === SUBSCRIBER_TYPES.length && weights.every((w) => Number.isFinite(w) && w >= 0) && weights.some((w) => w > 0);
  if (!valid) throw new RangeError(`typeWeights must be ${SUBSCRIBER_TYPES.length} non-negative numbers, not all zero`);
  return weights;
}

export interface WorldOptions {
  /** Subscribers to seed (default 100). */
  subscribers?: number;
  /** Relative weights of the seeded types, in SUBSCRIBER_TYPES order (default: mostly active, see seed.ts). */
  typeWeights?: readonly number[];
  /** Groups to create (default 3). */
  groups?: number;
  /** Issue ids above 2^53 (around 1.26e18) for subscribers, groups, campaigns, automations. */
  largeIds?: boolean;
  /** PRNG seed; the same seed and clock give the same world (default 1). */
  seed?: number;
  /** Current time as epoch ms (fractions give sub-ms precision). Default: performance-based wall clock. */
  clock?: () => number;
  /** Timezone of legacy renderings and filters: IANA name or fixed offset like `+14:00` (default UTC). */
  timezone?: string;
  /** account_id in payloads (default 424242). */
  accountId?: number;
  /** How many recent events `world.events` keeps (default 50 000; 0 keeps none). */
  eventLogLimit?: number;
  /**
   * Record every change of every subscriber with its time (`world.changes`, `world.asOf(us)`): the
   * oracle for history (docs/sql.md, "History"). Off by default: it keeps one snapshot per change.
   */
  recordChanges?: boolean;
}

/** One change of the world: a subscriber as it is right after the change at `atUs`. */
export interface WorldChange {
  /** Epoch microseconds (the subscriber's updated_at after the change). */
  atUs: number;
  subscriber: SubscriberView;
}

/** A plain snapshot of one subscriber, for tests to compare against the mirror. */
export interface SubscriberView {
  id: string;
  email: string;
  status: SubscriberType;
  source: string;
  sent: number;
  opensCount: number;
  clicksCount: number;
  ipAddress: string | null;
  optinIp: string | null;
  countryId: number;
  /** Epoch microseconds. */
  createdAtUs: number;
  updatedAtUs: number;
  subscribedAtUs: number | null;
  unsubscribedAtUs: number | null;
  optedInAtUs: number | null;
  deletedAtUs: number | null;
  forgetAtUs: number | null;
  fields: SubscriberFields;
  /** Ids of the groups it belongs to (kept after deletion; lists hide deleted subscribers). */
  groups: string[];
  deleted: boolean;
  forgotten: boolean;
}

export interface CreateSubscriberInput {
  email?: string;
  fields?: Partial<SubscriberFields>;
  /** Initial status (default active). */
  status?: SubscriberType;
  /** Group ids to add it to (each emits subscriber.added_to_group). */
  groups?: readonly string[];
  source?: string;
  ipAddress?: string | null;
}

export interface SendCampaignInput {
  name?: string;
  /** Recipient groups (default all). Active, non-deleted members receive it. */
  groupIds?: readonly string[];
}

export interface Membership {
  groupId: string;
  subscriberId: string;
  /** The type it is listed under: its status. */
  type: SubscriberType;
}

export type EventListener = (event: WorldEvent) => void;

interface GroupRecord extends GroupInfo {
  readonly index: number;
}

const DEFAULT_GROUP_NAMES = ['Newsletter', 'Customers', 'Beta testers', 'Webinar attendees', 'Partners'];

export function defaultClock(): number {
  return performance.timeOrigin + performance.now();
}

export class World {
  readonly accountId: number;
  readonly zone: Zone;
  readonly clock: () => number;
  private readonly table: SubscriberTable;
  private readonly idScheme: IdScheme;
  private readonly salt: number;
  private readonly largeIds: boolean;
  private readonly groupList: GroupRecord[] = [];
  private readonly groupById = new Map<string, GroupRecord>();
  private readonly automationList: AutomationInfo[] = [];
  private readonly campaignList: CampaignInfo[] = [];
  /** The account's custom field definitions: the eight documented keys as text, then what `defineField` adds. */
  private readonly fieldList: FieldDefinition[] = FIELD_KEYS.map((key, i) => ({
    id: String(i + 1),
    key,
    title: fieldTitle(key),
    type: 'text',
  }));
  private readonly listeners = new Set<EventListener>();
  private readonly log: WorldEvent[] = [];
  private readonly eventLogLimit: number;
  private readonly lists: ListScans;
  /** What the wire renderers read of a slot (`wire.ts`). */
  private readonly wire: SlotReader;
  private readonly changeLog: WorldChange[] | null;
  private lastStampUs = 0;
  private eventSeq = 0;
  private readonly typeWeights: readonly number[];
  private changeVersion = 0;

  constructor(options: WorldOptions = {}) {
    const seed = options.seed ?? 1;
    this.salt = hash32(seed, 0x51ed);
    this.largeIds = options.largeIds ?? false;
    this.accountId = options.accountId ?? 424242;
    this.zone = parseZone(options.timezone ?? 'UTC');
    this.clock = options.clock ?? defaultClock;
    this.eventLogLimit = options.eventLogLimit ?? 50_000;
    this.changeLog = options.recordChanges ? [] : null;
    this.idScheme = subscriberIdScheme(this.largeIds, this.salt);
    const subscribers = nonNegativeInteger(options.subscribers ?? 100, 'subscribers');
    const groups = nonNegativeInteger(options.groups ?? 3, 'groups');
    this.table = new SubscriberTable(subscribers + 16, hash32(this.salt, 0x0bde));
    this.lists = new ListScans(this.table);
    this.wire = {
      table: this.table,
      idAt: (slot) => this.idScheme.idOf(slot),
      personAt: (slot) => this.personAt(slot),
      statusAt: (slot) => this.statusAt(slot),
      sourceAt: (slot) => this.sourceAt(slot),
      localDateTime: (us) => this.localDateTime(us),
      localDate: (us) => this.localDate(us),
      legacyFieldType: (key) => (this.fieldList.find((f) => f.key === key)?.type ?? 'text').toUpperCase() as 'TEXT' | 'NUMBER' | 'DATE',
    };
    for (let g = 0; g < groups; g++) this.createGroup();
    this.typeWeights = typeWeightsOf(options.typeWeights);
    this.seedAccount(seed, subscribers);
  }

  private seedAccount(seed: number, subscribers: number): void {
    const nowUs = Math.floor(this.clock() * 1000);
    if (subscribers > 0 && this.groupList.length === 0) throw new RangeError('seeding subscribers needs at least one group');
    const newest = seedSubscribers(this.table, subscribers, this.groupList.length, mulberry32(seed), nowUs, this.typeWeights);
    this.table.rebuildOrder();
    this.lastStampUs = newest;
    // Seeded subscribers count as changed at their seeded updated_at, in time order.
    if (this.changeLog) {
      const slots = Array.from({ length: this.table.count }, (_, slot) => slot);
      slots.sort((a, b) => (this.table.updatedUs[a] ?? 0) - (this.table.updatedUs[b] ?? 0));
      for (const slot of slots) this.remember(slot);
    }
    this.automationList.push(this.makeAutomation('Welcome series'), this.makeAutomation('Re-engagement'));
    this.campaignList.push({
      id: sequenceId(this.largeIds, ID_FAMILY.campaign, 0),
      name: 'Launch announcement',
      total_recipients: this.count('active'),
      preview_url: this.previewUrl(0),
      date: isoMicros(nowUs - 7 * 86_400_000_000),
    });
  }

  // ---------------------------------------------------------------- custom fields

  /** The account's field definitions, in the order they were made (docs/upstream.md, "Field definitions"). */
  fieldDefinitions(): FieldDefinition[] {
    return this.fieldList.map((f) => ({ ...f }));
  }

  /**
   * Defines a custom field, or changes the type (and title) of one that exists. No subscriber changes
   * and no event is sent: the service announces no change of definitions.
   */
  defineField(key: string, type: FieldType, title: string = fieldTitle(key)): FieldDefinition {
    if (!/^[a-z][a-z0-9_]*$/.test(key))
      throw new RangeError(`field key must be lower-case letters, digits and _, got ${JSON.stringify(key)}`);
    if (type !== 'text' && type !== 'number' && type !== 'date')
      throw new RangeError(`field type must be text, number or date, got ${String(type)}`);
    const existing = this.fieldList.find((f) => f.key === key);
    if (existing) {
      existing.type = type;
      existing.title = title;
      return { ...existing };
    }
    const made: FieldDefinition = { id: String(this.fieldList.length + 1), key, title, type };
    this.fieldList.push(made);
    return { ...made };
  }

  // ---------------------------------------------------------------- reading

  /** Bumped by every change that can alter a legacy list; caches key on it. */
  get version(): number {
    return this.changeVersion;
  }

  now(): number {
    return this.clock();
  }

  groups(): GroupInfo[] {
    return this.groupList.map(({ id, name }) => ({ id, name }));
  }

  groupIds(): string[] {
    return this.groupList.map((g) => g.id);
  }

  group(id: string): GroupInfo | undefined {
    const g = this.groupById.get(id);
    return g ? { id: g.id, name: g.name } : undefined;
  }

  automations(): AutomationInfo[] {
    return [...this.automationList];
  }

  campaigns(): CampaignInfo[] {
    return [...this.campaignList];
  }

  /** Events emitted so far (the most recent `eventLogLimit`). */
  get events(): readonly WorldEvent[] {
    return this.log;
  }

  clearEvents(): void {
    this.log.length = 0;
  }

  /** Every recorded change in time order ([] unless `recordChanges`). */
  get changes(): readonly WorldChange[] {
    return this.changeLog ?? [];
  }

  /**
   * Every subscriber as it was at `atUs` (epoch µs), deleted ones included, from the recorded
   * changes: the latest snapshot at or before `atUs`. Throws unless `recordChanges` is on.
   */
  asOf(atUs: number): Map<string, SubscriberView> {
    if (!this.changeLog) throw new Error('world.asOf needs the recordChanges option');
    const out = new Map<string, SubscriberView>();
    for (const change of this.changeLog) {
      if (change.atUs > atUs) break;
      out.set(change.subscriber.id, change.subscriber);
    }
    return out;
  }

  /** What the legacy API listed at `atUs`: memberships of subscribers not deleted then. */
  membershipsAsOf(atUs: number): Membership[] {
    const out: Membership[] = [];
    for (const view of this.asOf(atUs).values()) {
      if (view.deleted) continue;
      for (const groupId of view.groups) out.push({ groupId, subscriberId: view.id, type: view.status });
    }
    return out;
  }

  onEvent(listener: EventListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Non-deleted subscribers, optionally of one type. */
  count(type?: SubscriberType): number {
    const code = type === undefined ? -1 : SUBSCRIBER_TYPES.indexOf(type);
    let n = 0;
    for (let slot = 0; slot < this.table.count; slot++) {
      if (!this.table.isDeleted(slot) && (code < 0 || this.table.status[slot] === code)) n++;
    }
    return n;
  }

  /** All subscribers ever created (including deleted ones). */
  get size(): number {
    return this.table.count;
  }

  has(id: string): boolean {
    return this.idScheme.slotOf(id, this.table.count) !== undefined;
  }

  /** A snapshot of the subscriber, deleted ones included; undefined for unknown ids. */
  subscriber(id: string): SubscriberView | undefined {
    const slot = this.idScheme.slotOf(id, this.table.count);
    return slot === undefined ? undefined : this.viewAt(slot);
  }

  /** Subscribers in creation order; deleted ones only with includeDeleted. */
  *subscribers(options: { includeDeleted?: boolean } = {}): IterableIterator<SubscriberView> {
    for (let slot = 0; slot < this.table.count; slot++) {
      if (options.includeDeleted || !this.table.isDeleted(slot)) yield this.viewAt(slot);
    }
  }

  *ids(options: { includeDeleted?: boolean } = {}): IterableIterator<string> {
    for (let slot = 0; slot < this.table.count; slot++) {
      if (options.includeDeleted || !this.table.isDeleted(slot)) yield this.idScheme.idOf(slot);
    }
  }

  /** Ids listed by the legacy API for the group (and type), in list order; [] for unknown groups. */
  members(groupId: string, type?: SubscriberType): string[] {
    const group = this.groupById.get(groupId);
    if (!group) return [];
    return Array.from(this.listSlots(group.index, type ?? null, [], false), (slot) => this.idScheme.idOf(slot));
  }

  memberCount(groupId: string, type?: SubscriberType): number {
    const group = this.groupById.get(groupId);
    return group ? this.listSlots(group.index, type ?? null, [], false).length : 0;
  }

  /** Whether the subscriber is listed in the group, and under which type. */
  membership(groupId: string, subscriberId: string): Membership | undefined {
    const group = this.groupById.get(groupId);
    const slot = this.idScheme.slotOf(subscriberId, this.table.count);
    if (!group || slot === undefined || this.table.isDeleted(slot) || !this.table.isMember(group.index, slot)) {
      return undefined;
    }
    return { groupId, subscriberId, type: this.statusAt(slot) };
  }

  /** Every (group, subscriber, type) row the legacy API lists: what a complete mirror must hold. */
  *memberships(): IterableIterator<Membership> {
    for (const group of this.groupList) {
      for (const slot of this.listSlots(group.index, null, [], false)) {
        yield { groupId: group.id, subscriberId: this.idScheme.idOf(slot), type: this.statusAt(slot) };
      }
    }
  }

  renderLegacy(id: string): LegacySubscriber {
    return legacySubscriber(this.wire, this.slotOrThrow(id));
  }

  /** Exactly the JSON text the legacy API writes for this subscriber (id as a bare number). */
  renderLegacyJson(id: string): string {
    return legacyJson(legacySubscriber(this.wire, this.slotOrThrow(id)));
  }

  renderWebhook(id: string): WebhookSubscriber {
    return webhookSubscriber(this.wire, this.slotOrThrow(id));
  }

  /** A random non-deleted subscriber id from the given PRNG, or undefined when none is left. */
  randomLiveId(random: () => number): string | undefined {
    const slot = this.randomLiveSlot(random);
    return slot === undefined ? undefined : this.idScheme.idOf(slot);
  }

  randomGroupId(random: () => number): string | undefined {
    return this.groupList[Math.floor(random() * this.groupList.length)]?.id;
  }

  // ---------------------------------------------------------------- legacy list support

  /**
   * Slots the legacy API lists for a group, in response order. Cached per world version: a full
   * pass over 1M subscribers then scans once, not once per page.
   * @internal used by the HTTP layer
   */
  listSlots(groupIndex: number, type: SubscriberType | null, ranges: readonly SecondsRange[], byUpdated: boolean): Uint32Array {
    return this.lists.listSlots(this.changeVersion, groupIndex, type, ranges, byUpdated);
  }

  /** @internal */
  groupIndexOf(groupId: string): number | undefined {
    return this.groupById.get(groupId)?.index;
  }

  /** @internal */
  legacyJsonAt(slot: number): string {
    return legacyJson(legacySubscriber(this.wire, slot));
  }

  /**
   * Slots the current API lists for a group and status, ascending by id (its cursor's sort key; ids
   * grow with the slot). Cached per world version like `listSlots`.
   * @internal used by the HTTP layer
   */
  idOrderedSlots(groupIndex: number, type: SubscriberType): Uint32Array {
    return this.lists.idOrderedSlots(this.changeVersion, groupIndex, type);
  }

  /** Ids the current API lists for the group and status, in its order (ascending id). */
  membersById(groupId: string, type: SubscriberType): string[] {
    const group = this.groupById.get(groupId);
    if (!group) return [];
    return Array.from(this.idOrderedSlots(group.index, type), (slot) => this.idScheme.idOf(slot));
  }

  /** @internal */
  slotOfId(id: string): number | undefined {
    return this.idScheme.slotOf(id, this.table.count);
  }

  /** @internal */
  idAt(slot: number): string {
    return this.idScheme.idOf(slot);
  }

  /**
   * The subscriber as the current API lists it: the shape of docs/upstream.md, "Subscriber object" (string id, `status`, `fields`) with
   * dates as `YYYY-MM-DD HH:MM:SS` in the world's zone, and without `deleted_at`/`forget_at`.
   */
  renderCurrent(id: string): Record<string, unknown> {
    return currentSubscriber(this.wire, this.slotOrThrow(id));
  }

  /** @internal */
  currentJsonAt(slot: number): string {
    return JSON.stringify(currentSubscriber(this.wire, slot));
  }

  // ---------------------------------------------------------------- mutations

  createGroup(name?: string): GroupInfo {
    const index = this.table.addGroupBitset();
    const record: GroupRecord = {
      index,
      id: sequenceId(this.largeIds, ID_FAMILY.group, index),
      name: name ?? DEFAULT_GROUP_NAMES[index] ?? `Group ${index + 1}`,
    };
    this.groupList.push(record);
    this.groupById.set(record.id, record);
    return { id: record.id, name: record.name };
  }

  createSubscriber(input: CreateSubscriberInput = {}): string {
    const groups = (input.groups ?? []).map((id) => this.groupOrThrow(id));
    const status = input.status ?? 'active';
    if (!isSubscriberType(status)) throw new RangeError(`unknown status: ${String(status)}`);
    const t = this.table;
    const slot = t.allocate(1);
    t.insertIntoOrder(slot);
    const us = this.stamp();
    const id = this.idScheme.idOf(slot);
    t.status[slot] = SUBSCRIBER_TYPES.indexOf(status);
    t.flags[slot] = 0;
    t.source[slot] = Math.max(0, (SOURCES as readonly string[]).indexOf(input.source ?? 'api'));
    t.countryId[slot] = 0;
    t.sent[slot] = 0;
    t.opens[slot] = 0;
    t.clicks[slot] = 0;
    t.ip[slot] = ipFromString(input.ipAddress);
    t.createdUs[slot] = us;
    t.updatedUs[slot] = us;
    t.subscribedUs[slot] = status === 'unconfirmed' ? NaN : us;
    t.unsubscribedUs[slot] = status === 'unsubscribed' ? us : NaN;
    t.optedInUs[slot] = NaN;
    t.optinIp[slot] = 0;
    t.overrides.set(slot, {
      email: input.email ?? `new.subscriber.${id}@example.com`,
      fields: { ...EMPTY_FIELDS, ...definedFields(input.fields) },
    });
    for (const group of groups) t.setMember(group.index, slot, true);
    this.changed();
    this.remember(slot);
    this.emit('subscriber.created', slot, us);
    for (const group of groups) this.emit('subscriber.added_to_group', slot, us, { group: publicGroup(group) });
    return id;
  }

  /** Changes custom fields and/or email: subscriber.updated. */
  updateFields(id: string, patch: Partial<SubscriberFields> & { email?: string }): WorldEvent[] {
    const slot = this.liveSlot(id);
    const { email, ...fieldPatch } = patch;
    const current = this.personAt(slot);
    this.table.overrides.set(slot, {
      email: email ?? current.email,
      fields: { ...current.fields, ...definedFields(fieldPatch) },
    });
    return this.commit(slot, 'subscriber.updated');
  }

  unsubscribe(id: string): WorldEvent[] {
    return this.setStatus(id, 'unsubscribed', 'subscriber.unsubscribed');
  }

  /**
   * An unsubscribe the service stamps only in `date_unsubscribe` / `unsubscribed_at`: `updated_at`
   * keeps its old value (captured from the real service: `subscriber.unsubscribed` with `updated_at`
   * at the creation time). A `date_updated` filter does not see it; a `date_unsubscribe` one does.
   */
  unsubscribeUnstamped(id: string): WorldEvent[] {
    const slot = this.liveSlot(id);
    if (this.statusAt(slot) === 'unsubscribed') return [];
    const us = this.stamp();
    this.table.status[slot] = SUBSCRIBER_TYPES.indexOf('unsubscribed');
    this.table.unsubscribedUs[slot] = us;
    this.changed();
    const event = this.emit('subscriber.unsubscribed', slot, us);
    return event ? [event] : [];
  }

  /**
   * A field change stamped with `atMs` instead of the clock: a clock or timezone error upstream
   * (e.g. `date_updated` 2099-01-01). Later mutations stamp from the clock again.
   */
  updateDatedAt(id: string, atMs: number, patch: Partial<SubscriberFields> = {}): WorldEvent[] {
    const slot = this.liveSlot(id);
    const current = this.personAt(slot);
    this.table.overrides.set(slot, { email: current.email, fields: { ...current.fields, ...definedFields(patch) } });
    return this.commitAt(slot, Math.floor(atMs * 1000), ['subscriber.updated']);
  }

  // ---------------------------------------------------------------- blind spots
  // Changes the service makes without stamping `updated_at` and without announcing them: what no
  // webhook and no date filter can see (docs/operations.md, "The audit"). Each emits nothing and
  // keeps every stamp; the history oracle records it at the clock's time.

  /** Fields and/or email change, `updated_at` stays, no event (an unstamped change). */
  updateFieldsSilently(id: string, patch: Partial<SubscriberFields> & { email?: string }): void {
    const slot = this.liveSlot(id);
    const { email, ...fieldPatch } = patch;
    const current = this.personAt(slot);
    this.table.overrides.set(slot, { email: email ?? current.email, fields: { ...current.fields, ...definedFields(fieldPatch) } });
    this.changedSilently(slot);
  }

  /** Joins the group keeping its old `updated_at` (e.g. 3 days old), no event: older than any incremental window. */
  addToGroupSilently(id: string, groupId: string): void {
    const slot = this.liveSlot(id);
    const group = this.groupOrThrow(groupId);
    if (this.table.isMember(group.index, slot)) return;
    this.table.setMember(group.index, slot, true);
    this.changedSilently(slot);
  }

  /** Leaves the group with no stamp and no event: only a full pass (or a count) shows it. */
  removeFromGroupSilently(id: string, groupId: string): void {
    const slot = this.liveSlot(id);
    const group = this.groupOrThrow(groupId);
    if (!this.table.isMember(group.index, slot)) return;
    this.table.setMember(group.index, slot, false);
    this.changedSilently(slot);
  }

  /** Stamps `updated_at` with `atMs` without changing anything else or emitting an event (a member dated in the past). */
  restamp(id: string, atMs: number): void {
    const slot = this.liveSlot(id);
    this.table.updatedUs[slot] = Math.floor(atMs * 1000);
    this.changedSilently(slot);
  }

  private changedSilently(slot: number): void {
    this.changed();
    this.changeLog?.push({ atUs: Math.max(Math.floor(this.clock() * 1000), this.lastStampUs), subscriber: this.viewAt(slot) });
  }

  bounce(id: string): WorldEvent[] {
    return this.setStatus(id, 'bounced', 'subscriber.bounced');
  }

  /** A spam complaint: status junk, event subscriber.spam_reported. */
  markJunk(id: string): WorldEvent[] {
    return this.setStatus(id, 'junk', 'subscriber.spam_reported');
  }

  /** No kind names this transition; it is reported as subscriber.updated. */
  markUnconfirmed(id: string): WorldEvent[] {
    return this.setStatus(id, 'unconfirmed', 'subscriber.updated');
  }

  /** Status active: subscriber.active; from unconfirmed it is a confirmation, so subscriber.updated first. */
  activate(id: string): WorldEvent[] {
    const slot = this.liveSlot(id);
    const previous = this.statusAt(slot);
    if (previous !== 'unconfirmed') return this.setStatus(id, 'active', 'subscriber.active');
    const t = this.table;
    const us = this.stamp();
    t.status[slot] = SUBSCRIBER_TYPES.indexOf('active');
    t.optedInUs[slot] = us;
    t.optinIp[slot] = t.ip[slot] ?? 0;
    if (Number.isNaN(t.subscribedUs[slot] ?? NaN)) t.subscribedUs[slot] = us;
    return this.commitAt(slot, us, ['subscriber.updated', 'subscriber.active']);
  }

  addToGroup(id: string, groupId: string): WorldEvent[] {
    const slot = this.liveSlot(id);
    const group = this.groupOrThrow(groupId);
    if (this.table.isMember(group.index, slot)) return [];
    this.table.setMember(group.index, slot, true);
    return this.commit(slot, 'subscriber.added_to_group', { group: publicGroup(group) });
  }

  removeFromGroup(id: string, groupId: string): WorldEvent[] {
    const slot = this.liveSlot(id);
    const group = this.groupOrThrow(groupId);
    if (!this.table.isMember(group.index, slot)) return [];
    this.table.setMember(group.index, slot, false);
    return this.commit(slot, 'subscriber.removed_from_group', { group: publicGroup(group) });
  }

  /** Sets deleted_at: the subscriber leaves every legacy list; subscriber.deleted. */
  deleteSubscriber(id: string): WorldEvent[] {
    const slot = this.liveSlot(id);
    const us = this.stamp();
    this.table.flags[slot] = (this.table.flags[slot] ?? 0) | FLAG_DELETED;
    this.table.deletedUs.set(slot, us);
    return this.commitAt(slot, us, ['subscriber.deleted']);
  }

  /**
   * GDPR forget: deleted (if not already) and personal data erased (email, fields, IPs), id and
   * timestamps kept; forget_at and deleted_at set; subscriber.deleted. Works on deleted subscribers too.
   */
  forget(id: string): WorldEvent[] {
    const slot = this.slotOrThrow(id);
    if (this.table.isForgotten(slot)) return [];
    const t = this.table;
    const us = this.stamp();
    t.flags[slot] = (t.flags[slot] ?? 0) | FLAG_DELETED | FLAG_FORGOTTEN;
    if (!t.deletedUs.has(slot)) t.deletedUs.set(slot, us);
    t.forgetUs.set(slot, us);
    t.overrides.set(slot, { erased: true });
    t.ip[slot] = 0;
    t.optinIp[slot] = 0;
    return this.commitAt(slot, us, ['subscriber.deleted']);
  }

  triggerAutomation(id: string, automationId?: string): WorldEvent[] {
    const slot = this.liveSlot(id);
    return this.commit(slot, 'subscriber.automation_triggered', { automation: this.automationOrThrow(automationId) });
  }

  completeAutomation(id: string, automationId?: string): WorldEvent[] {
    const slot = this.liveSlot(id);
    return this.commit(slot, 'subscriber.automation_completed', { automation: this.automationOrThrow(automationId) });
  }

  /** Sends to active members of the groups: their `sent` grows and updated_at moves; campaign.sent. */
  sendCampaign(input: SendCampaignInput = {}): CampaignInfo {
    const groups = (input.groupIds ?? this.groupIds()).map((id) => this.groupOrThrow(id));
    const us = this.stamp();
    const t = this.table;
    const active = SUBSCRIBER_TYPES.indexOf('active');
    let recipients = 0;
    for (let slot = 0; slot < t.count; slot++) {
      if (t.isDeleted(slot) || t.status[slot] !== active) continue;
      if (!groups.some((g) => t.isMember(g.index, slot))) continue;
      t.sent[slot] = (t.sent[slot] ?? 0) + 1;
      t.updatedUs[slot] = us;
      this.remember(slot);
      recipients++;
    }
    const n = this.campaignList.length;
    const campaign: CampaignInfo = {
      id: sequenceId(this.largeIds, ID_FAMILY.campaign, n),
      name: input.name ?? `Campaign ${n + 1}`,
      total_recipients: recipients,
      preview_url: this.previewUrl(n),
      date: isoMicros(us),
    };
    this.campaignList.push(campaign);
    this.changed();
    this.emit('campaign.sent', null, us, { campaign });
    return campaign;
  }

  open(id: string, campaignId?: string): WorldEvent[] {
    const slot = this.liveSlot(id);
    const campaign = this.campaignOrThrow(campaignId);
    this.table.opens[slot] = (this.table.opens[slot] ?? 0) + 1;
    return this.commit(slot, 'campaign.open', { campaign });
  }

  click(id: string, options: { campaignId?: string; url?: string } = {}): WorldEvent[] {
    const slot = this.liveSlot(id);
    const campaign = this.campaignOrThrow(options.campaignId);
    this.table.clicks[slot] = (this.table.clicks[slot] ?? 0) + 1;
    const linkUrl = options.url ?? `https://example.com/landing/${campaign.id}`;
    return this.commit(slot, 'campaign.click', { campaign, linkUrl });
  }

  // ---------------------------------------------------------------- internals

  private setStatus(id: string, status: SubscriberType, kind: EventKind): WorldEvent[] {
    const slot = this.liveSlot(id);
    if (this.statusAt(slot) === status) return [];
    const us = this.stamp();
    this.table.status[slot] = SUBSCRIBER_TYPES.indexOf(status);
    if (status === 'unsubscribed') this.table.unsubscribedUs[slot] = us;
    if (status === 'active' && Number.isNaN(this.table.subscribedUs[slot] ?? NaN)) this.table.subscribedUs[slot] = us;
    return this.commitAt(slot, us, [kind]);
  }

  private commit(slot: number, kind: EventKind, extra: EventExtra = {}): WorldEvent[] {
    return this.commitAt(slot, this.stamp(), [kind], extra);
  }

  private commitAt(slot: number, us: number, kinds: readonly EventKind[], extra: EventExtra = {}): WorldEvent[] {
    this.table.updatedUs[slot] = us;
    this.changed();
    this.remember(slot);
    const events: WorldEvent[] = [];
    for (const kind of kinds) {
      const event = this.emit(kind, slot, us, extra);
      if (event) events.push(event);
    }
    return events;
  }

  private changed(): void {
    this.changeVersion++;
  }

  /** Records the subscriber as it is now, at its updated_at (stamps never go backwards). */
  private remember(slot: number): void {
    this.changeLog?.push({ atUs: this.table.updatedUs[slot] ?? 0, subscriber: this.viewAt(slot) });
  }

  /** Microsecond stamp from the clock, strictly after the previous one so versions never tie. */
  private stamp(): number {
    const us = Math.max(Math.floor(this.clock() * 1000), this.lastStampUs + 1);
    this.lastStampUs = us;
    return us;
  }

  private emit(kind: EventKind, slot: number | null, us: number, extra: EventExtra = {}): WorldEvent | undefined {
    if (this.listeners.size === 0 && this.eventLogLimit === 0) return undefined;
    const event: WorldEvent = {
      seq: ++this.eventSeq,
      kind,
      atUs: us,
      subscriberId: slot === null ? null : this.idScheme.idOf(slot),
      subscriber: slot === null ? null : webhookSubscriber(this.wire, slot),
      ...extra,
    };
    this.record(event);
    for (const listener of this.listeners) listener(event);
    return event;
  }

  private record(event: WorldEvent): void {
    if (this.eventLogLimit === 0) return;
    this.log.push(event);
    // Trim in chunks so a long soak run does not pay an O(n) shift per event.
    if (this.log.length > this.eventLogLimit + Math.ceil(this.eventLogLimit / 10)) {
      this.log.splice(0, this.log.length - this.eventLogLimit);
    }
  }

  private viewAt(slot: number): SubscriberView {
    const t = this.table;
    const person = this.personAt(slot);
    return {
      id: this.idScheme.idOf(slot),
      email: person.email,
      status: this.statusAt(slot),
      source: this.sourceAt(slot),
      sent: t.sent[slot] ?? 0,
      opensCount: t.opens[slot] ?? 0,
      clicksCount: t.clicks[slot] ?? 0,
      ipAddress: ipToString(t.ip[slot] ?? 0),
      optinIp: ipToString(t.optinIp[slot] ?? 0),
      countryId: t.countryId[slot] ?? 0,
      createdAtUs: t.createdUs[slot] ?? 0,
      updatedAtUs: t.updatedUs[slot] ?? 0,
      subscribedAtUs: nullable(t.subscribedUs[slot]),
      unsubscribedAtUs: nullable(t.unsubscribedUs[slot]),
      optedInAtUs: nullable(t.optedInUs[slot]),
      deletedAtUs: t.deletedUs.get(slot) ?? null,
      forgetAtUs: t.forgetUs.get(slot) ?? null,
      fields: { ...person.fields },
      groups: this.groupList.filter((g) => t.isMember(g.index, slot)).map((g) => g.id),
      deleted: t.isDeleted(slot),
      forgotten: t.isForgotten(slot),
    };
  }

  private personAt(slot: number): { email: string; fields: SubscriberFields } {
    const override = this.table.overrides.get(slot);
    if (override?.erased) return { email: '', fields: EMPTY_FIELDS };
    if (override?.email !== undefined && override.fields !== undefined) {
      return { email: override.email, fields: override.fields };
    }
    const derived = derivePerson(this.salt, slot);
    return { email: override?.email ?? derived.email, fields: override?.fields ?? derived.fields };
  }

  private statusAt(slot: number): SubscriberType {
    return SUBSCRIBER_TYPES[this.table.status[slot] ?? 0] ?? 'active';
  }

  private sourceAt(slot: number): string {
    return SOURCES[this.table.source[slot] ?? 0] ?? 'api';
  }

  private localDateTime(us: number | undefined): string | null {
    return us === undefined || Number.isNaN(us) ? null : formatLocalDateTime(us / 1000, this.zone);
  }

  private localDate(us: number | undefined): string | null {
    return us === undefined || Number.isNaN(us) ? null : formatLocalDate(us / 1000, this.zone);
  }

  private slotOrThrow(id: string): number {
    const slot = this.idScheme.slotOf(id, this.table.count);
    if (slot === undefined) throw new RangeError(`unknown subscriber id: ${id}`);
    return slot;
  }

  private liveSlot(id: string): number {
    const slot = this.slotOrThrow(id);
    if (this.table.isDeleted(slot)) throw new RangeError(`subscriber ${id} is deleted`);
    return slot;
  }

  private randomLiveSlot(random: () => number): number | undefined {
    const n = this.table.count;
    if (n === 0) return undefined;
    for (let attempt = 0; attempt < 32; attempt++) {
      const slot = Math.floor(random() * n);
      if (!this.table.isDeleted(slot)) return slot;
    }
    for (let slot = 0; slot < n; slot++) if (!this.table.isDeleted(slot)) return slot;
    return undefined;
  }

  private groupOrThrow(id: string): GroupRecord {
    const group = this.groupById.get(id);
    if (!group) throw new RangeError(`unknown group id: ${id}`);
    return group;
  }

  private automationOrThrow(id: string | undefined): AutomationInfo {
    const automation = id === undefined ? this.automationList[0] : this.automationList.find((a) => a.id === id);
    if (!automation) throw new RangeError(`unknown automation id: ${String(id)}`);
    return automation;
  }

  private campaignOrThrow(id: string | undefined): CampaignInfo {
    const campaign = id === undefined ? this.campaignList.at(-1) : this.campaignList.find((c) => c.id === id);
    if (!campaign) throw new RangeError(`unknown campaign id: ${String(id)}`);
    return campaign;
  }

  private makeAutomation(name: string): AutomationInfo {
    return { id: sequenceId(this.largeIds, ID_FAMILY.automation, this.automationList.length), name };
  }

  private previewUrl(n: number): string {
    return `https://preview.example.com/campaigns/${sequenceId(this.largeIds, ID_FAMILY.campaign, n)}`;
  }
}

interface EventExtra {
  group?: GroupInfo;
  automation?: AutomationInfo;
  campaign?: CampaignInfo;
  linkUrl?: string;
}

function publicGroup(group: GroupRecord): GroupInfo {
  return { id: group.id, name: group.name };
}

function nullable(value: number | undefined): number | null {
  return value === undefined || Number.isNaN(value) ? null : value;
}

/** The string values of a patch: the documented keys and any custom one (`email` is not a field). */
function definedFields(patch: Partial<SubscriberFields> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(patch ?? {})) if (key !== 'email' && typeof value === 'string') out[key] = value;
  return out;
}

/** `last_name` → `Last name`. */
function fieldTitle(key: string): string {
  const words = key.replace(/_/g, ' ');
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function nonNegativeInteger(value: number, name: string): number {
  if (!Number.isInteger(value) || value < 0) throw new RangeError(`${name} must be a non-negative integer, got ${value}`);
  return value;
}
