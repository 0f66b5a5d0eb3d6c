/**
 * What each event kind writes to the mirror (docs/architecture.md, "Webhook path"), as a table: `EFFECTS` has one entry
 * per kind (docs/upstream.md, "Event kinds") listing its effects (docs/architecture.md, "Conventions": table-driven).
 *
 * Two steps, so the per-kind logic is testable without a database:
 * - `planDelivery(events)` (pure) turns the events of one delivery into an {@link EffectPlan}: every
 *   subscriber version, reference row, membership fact and activity row the delivery carries.
 * - `applyPlan(client, plan)` hands the plan to `src/mirror/store/`, the only writer of mirrored
 *   tables, on the caller's transaction, with one statement per kind of row rather than one per event
 *   (a batch of 100 `campaign.open` is one subscriber upsert, one campaign upsert, one activity insert).
 *
 * Ordering (invariant 2): deliveries are applied concurrently and in any order, and batches repeat
 * a subscriber at different versions. Nothing here relies on arrival order: subscriber versions are
 * ordered by the store's version-time guard, memberships by their fact time (`at` = the version time
 * of the subscriber in the event, `versionTime` in src/mirror/version.ts), and activity rows are
 * keyed by delivery and item position, so a delivery applied again writes none (invariant 5).
 *
 * Decisions:
 * - `subscriber.deleted` is a tombstone: the subscriber's own `deleted_at`/`forget_at` come through the
 *   guarded upsert (the store erases personal data when `forget_at` is set), and every current
 *   membership ends at the event's time (`endMemberships`): the service stops listing a deleted
 *   subscriber in all its groups, which is what a full poll pass would conclude too. An add that is
 *   older than a stored deletion but arrives after it is ended right away (the delete could not name
 *   its group); see `applyPlan`.
 * - `campaign.sent` concerns a campaign only: a `campaigns` row with `sent_at`, no activity row.
 * - A membership's `type` is the subscriber's status in the add event (`group_members.type` doc);
 *   later status events do not rewrite it (the poll's listing does).
 * - Unknown kinds never reach this module: `parseDelivery` reports them and the receiver stored the
 *   note in `error` (invariant 9).
 */
import type pg from 'pg';
import { canonicalTimestampSql } from '../db/columns.js';
import type { MirrorSource } from '../db/schema.js';
import type { ActivityRow, AutomationRow, CampaignRow, GroupRow, SubscriberRow } from '../mirror/normalize.js';
import { automationRow, campaignRow, groupRow, webhookSubscriberRow } from '../mirror/schemas.js';
import {
  endMemberships,
  keepingPlans,
  recordActivity,
  removeMembership,
  upsertAutomations,
  upsertCampaigns,
  upsertGroups,
  upsertMemberships,
  upsertSubscribers,
  type UpsertCounts,
} from '../mirror/store/index.js';
import { versionTime } from '../mirror/version.js';
import type { Queryable } from '../ground/queryable.js';
import type { EventKind, EventOf, WebhookEvent, WebhookSubscriber } from './payloads.js';

const VIA: MirrorSource = 'webhook';

// ---------------------------------------------------------------------------------------------
// The plan

/** A membership fact of one event, ordered by `at` (the version time of the subscriber in the event). */
export interface MembershipFact {
  op: 'add' | 'remove';
  groupId: string;
  subscriberId: string;
  /** The subscriber's status in the event (add only; null = not carried, keeps the stored type). */
  type: string | null;
  at: string;
  /** Position of the event in the delivery: breaks ties between facts with the same `at`. */
  index: number;
}

/** Everything one delivery writes, grouped by kind of row. */
export interface EffectPlan {
  /** Every subscriber version carried, in event order (the store keeps the newest per id). */
  subscribers: SubscriberRow[];
  groups: GroupRow[];
  automations: AutomationRow[];
  campaigns: CampaignRow[];
  memberships: MembershipFact[];
  /** `subscriber.deleted`: all current memberships of the subscriber end at `at`. */
  tombstones: Array<{ subscriberId: string; at: string }>;
  activity: ActivityRow[];
}

/** Collects the effects of one delivery; normalizes each carried subscriber object once. */
export class PlanBuilder {
  readonly plan: EffectPlan = {
    subscribers: [],
    groups: [],
    automations: [],
    campaigns: [],
    memberships: [],
    tombstones: [],
    activity: [],
  };
  private readonly rows = new WeakMap<WebhookSubscriber, SubscriberRow>();

  constructor(
    private readonly deliveryId: string | null = null,
    private readonly receivedAt: string | null = null,
  ) {}

  /** The row of an event's subscriber (validated by `parseDelivery` with the mirror's own schema). */
  subscriber(raw: WebhookSubscriber): SubscriberRow {
    let row = this.rows.get(raw);
    if (!row) {
      row = webhookSubscriberRow(raw);
      this.rows.set(raw, row);
    }
    return row;
  }

  activity(row: Omit<ActivityRow, 'deliveryId' | 'occurredAt'>): void {
    this.plan.activity.push({ ...row, deliveryId: this.deliveryId, occurredAt: this.receivedAt });
  }
}

/** One effect of an event kind. Typed by what the event must carry, so the table below type-checks. */
export type Effect<E> = (event: E, plan: PlanBuilder) => void;

type WithSubscriber = Extract<WebhookEvent, { subscriber: WebhookSubscriber }>;

// ---------------------------------------------------------------------------------------------
// Effects

/** Guarded upsert of the subscriber version the event carries (invariant 2), status and tombstone included. */
const mirrorSubscriber: Effect<{ subscriber: WebhookSubscriber }> = (event, plan) => {
  plan.plan.subscribers.push(plan.subscriber(event.subscriber));
};

const mirrorGroup: Effect<{ group: EventOf<'subscriber.added_to_group'>['group'] }> = (event, plan) => {
  plan.plan.groups.push(groupRow(event.group));
};

const mirrorAutomation: Effect<{ automation: EventOf<'subscriber.automation_triggered'>['automation'] }> = (event, plan) => {
  plan.plan.automations.push(automationRow(event.automation));
};

/** A campaign as embedded in open/click events: `sent_at` unknown, the stored one is kept. */
const mirrorCampaign: Effect<{ campaign: EventOf<'campaign.open'>['campaign'] }> = (event, plan) => {
  plan.plan.campaigns.push(campaignRow(event.campaign));
};

/** `campaign.sent`: the campaign's `date` is its send time. */
const mirrorSentCampaign: Effect<EventOf<'campaign.sent'>> = (event, plan) => {
  plan.plan.campaigns.push(campaignRow(event.campaign, { sent: true }));
};

function membership(op: MembershipFact['op']): Effect<EventOf<'subscriber.added_to_group' | 'subscriber.removed_from_group'>> {
  return (event, plan) => {
    const row = plan.subscriber(event.subscriber);
    plan.plan.memberships.push({
      op,
      groupId: groupRow(event.group).id,
      subscriberId: row.values.id,
      type: op === 'add' && row.provided.includes('status') ? row.values.status : null,
      // The ordering guard: a late retry of an older event cannot undo a newer one.
      at: versionTime(row.values),
      index: event.index,
    });
  };
}

const endAllMemberships: Effect<EventOf<'subscriber.deleted'>> = (event, plan) => {
  const row = plan.subscriber(event.subscriber);
  plan.plan.tombstones.push({ subscriberId: row.values.id, at: versionTime(row.values) });
};

/**
 * One `subscriber_activity` row per event that concerns a subscriber, keyed by its delivery and its
 * position there (`itemIndex`): the same delivery applied again collapses (invariant 5), two
 * identical items of one batch are two events. Payloads carry no event time: `occurred_at` is the
 * delivery's receipt, and the subscriber's `updated_at` is kept next to it.
 */
const activity: Effect<WithSubscriber> = (event, plan) => {
  const row = plan.subscriber(event.subscriber);
  plan.activity({
    kind: event.kind,
    subscriberId: row.values.id,
    groupId: 'group' in event ? groupRow(event.group).id : null,
    automationId: 'automation' in event ? automationRow(event.automation).id : null,
    campaignId: 'campaign' in event ? campaignRow(event.campaign).id : null,
    linkUrl: 'linkUrl' in event ? event.linkUrl : null,
    subscriberUpdatedAt: row.values.updatedAt,
    itemIndex: event.index,
  });
};

// ---------------------------------------------------------------------------------------------
// The table

const subscriberFact = [mirrorSubscriber, activity] as const;

/** docs/upstream.md, "Event kinds" kinds → their effects, applied in this order to each event. */
export const EFFECTS = {
  'subscriber.created': subscriberFact,
  'subscriber.updated': subscriberFact,
  // Status and its timestamps come from the subscriber object itself, through the guarded upsert.
  'subscriber.unsubscribed': subscriberFact,
  'subscriber.bounced': subscriberFact,
  'subscriber.spam_reported': subscriberFact,
  'subscriber.active': subscriberFact,
  'subscriber.added_to_group': [mirrorSubscriber, mirrorGroup, membership('add'), activity],
  'subscriber.removed_from_group': [mirrorSubscriber, mirrorGroup, membership('remove'), activity],
  'subscriber.automation_triggered': [mirrorSubscriber, mirrorAutomation, activity],
  'subscriber.automation_completed': [mirrorSubscriber, mirrorAutomation, activity],
  'subscriber.deleted': [mirrorSubscriber, endAllMemberships, activity],
  'campaign.sent': [mirrorSentCampaign],
  'campaign.open': [mirrorSubscriber, mirrorCampaign, activity],
  'campaign.click': [mirrorSubscriber, mirrorCampaign, activity],
} as const satisfies { readonly [K in EventKind]: readonly Effect<EventOf<K>>[] };

/**
 * The effects of a delivery's events. Pure; the events come from `parseDelivery`, which validated
 * every carried object with the schemas the rows are built from, so nothing here can reject them.
 */
export function planDelivery(
  events: readonly WebhookEvent[],
  deliveryId: string | null = null,
  receivedAt: string | null = null,
): EffectPlan {
  const builder = new PlanBuilder(deliveryId, receivedAt);
  for (const event of events) {
    const effects = EFFECTS[event.kind] as readonly Effect<WebhookEvent>[];
    for (const effect of effects) effect(event, builder);
  }
  return builder.plan;
}

// ---------------------------------------------------------------------------------------------
// Applying a plan

export interface ApplyCounts {
  subscribers: UpsertCounts;
  /** Membership facts written (adds and removals that changed something). */
  memberships: number;
  /** Memberships ended by deletions. */
  membershipsEnded: number;
  activity: number;
}

/**
 * Runs the plan's store calls on `client`, inside the caller's transaction. Every list is sorted by
 * key first, so two deliveries touching the same rows take their row locks in the same order and do
 * not deadlock each other.
 */
export async function applyPlan(client: pg.ClientBase, plan: EffectPlan): Promise<ApplyCounts> {
  const exec = keepingPlans(client);
  const subscribers = await upsertSubscribers(
    exec,
    sortedBy(plan.subscribers, (r) => r.values.id),
  );
  await upsertGroups(exec, mergeById(plan.groups));
  await upsertAutomations(exec, mergeById(plan.automations));
  await upsertCampaigns(exec, mergeById(plan.campaigns));

  let memberships = 0;
  for (const round of membershipRounds(plan.memberships)) memberships += await applyMembershipRound(exec, round);

  // Deletions end memberships at their own time; adds older than a stored deletion end at its time.
  const ends = new Map<string, string>();
  const endAt = (subscriberId: string, at: string) => {
    const known = ends.get(subscriberId);
    if (known === undefined || at > known) ends.set(subscriberId, at);
  };
  for (const t of plan.tombstones) endAt(t.subscriberId, t.at);
  for (const s of await supersededAdds(exec, plan.memberships)) endAt(s.subscriberId, s.at);
  let membershipsEnded = 0;
  for (const [subscriberId, at] of [...ends].sort(([a], [b]) => compare(a, b))) {
    membershipsEnded += await endMemberships(exec, subscriberId, at, VIA);
  }

  // Keyed by (delivery, item): in item order, and no other delivery's rows share a key.
  const activity = await recordActivity(exec, plan.activity);
  return { subscribers, memberships, membershipsEnded, activity };
}

/**
 * Membership facts in rounds: round k holds the k-th fact (by `at`, then position) of each
 * (group, subscriber), so a batch that adds, removes and re-adds one member applies all three in
 * order while the common case (one fact per member) is a single round: one upsert per group.
 */
export function membershipRounds(facts: readonly MembershipFact[]): MembershipFact[][] {
  const byKey = new Map<string, MembershipFact[]>();
  for (const fact of facts) {
    const key = `${fact.groupId}/${fact.subscriberId}`;
    const list = byKey.get(key);
    if (list) list.push(fact);
    else byKey.set(key, [fact]);
  }
  const rounds: MembershipFact[][] = [];
  for (const list of byKey.values()) {
    list.sort((a, b) => compare(a.at, b.at) || a.index - b.index);
    list.forEach((fact, k) => (rounds[k] ??= []).push(fact));
  }
  return rounds;
}

async function applyMembershipRound(client: Queryable, round: readonly MembershipFact[]): Promise<number> {
  let written = 0;
  const addsByGroup = new Map<string, MembershipFact[]>();
  for (const fact of round) {
    if (fact.op !== 'add') continue;
    const list = addsByGroup.get(fact.groupId);
    if (list) list.push(fact);
    else addsByGroup.set(fact.groupId, [fact]);
  }
  for (const [groupId, adds] of [...addsByGroup].sort(([a], [b]) => compare(a, b))) {
    const members = sortedBy(adds, (f) => f.subscriberId).map((f) => ({ subscriberId: f.subscriberId, type: f.type, at: f.at }));
    const counts = await upsertMemberships(client, groupId, members, { via: VIA });
    written += counts.inserted + counts.updated;
  }
  // The store has no bulk removal; removals are rare next to adds, one statement each.
  const removals = sortedBy(
    round.filter((f) => f.op === 'remove'),
    (f) => `${f.groupId}/${f.subscriberId}`,
  );
  for (const fact of removals) {
    if (await removeMembership(client, fact.groupId, fact.subscriberId, fact.at, VIA)) written++;
  }
  return written;
}

/*
 * A read, not a write (the store stays the only writer): adds whose subscriber is stored as deleted
 * with a newer version than the add. Such an add arrived after the deletion had already ended the
 * subscriber's memberships, and the deletion could not name this group.
 */
const SUPERSEDED_ADDS_SQL = `
select t.subscriber_id as "subscriberId",
       ${canonicalTimestampSql('s.version_at')} as at
  from unnest($1::text[], $2::timestamptz[]) as t(subscriber_id, at)
  join subscribers s on s.account = mirror_account() and s.id = t.subscriber_id
 where s.deleted_at is not null and s.version_at > t.at`;

async function supersededAdds(client: Queryable, facts: readonly MembershipFact[]): Promise<Array<{ subscriberId: string; at: string }>> {
  const adds = facts.filter((f) => f.op === 'add');
  if (adds.length === 0) return [];
  const { rows } = await client.query<{ subscriberId: string; at: string }>({
    name: 'sm_consumer_superseded_adds',
    text: SUPERSEDED_ADDS_SQL,
    values: [adds.map((f) => f.subscriberId), adds.map((f) => f.at)],
  });
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Helpers

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** A stable sort (same-key rows keep their order: the store breaks `updated_at` ties by position). */
function sortedBy<T>(rows: readonly T[], key: (row: T) => string): T[] {
  return [...rows].sort((a, b) => compare(key(a), key(b)));
}

/**
 * One row per id, later non-null values winning: the store keeps only one row per id of a call, so
 * `campaign.sent` followed by a `campaign.open` (which does not know `sent_at`) in one batch must not
 * lose the send time. Sorted by id.
 */
export function mergeById<T extends { id: string }>(rows: readonly T[]): T[] {
  const merged = new Map<string, T>();
  for (const row of rows) {
    const previous = merged.get(row.id);
    if (!previous) {
      merged.set(row.id, row);
      continue;
    }
    const next: Record<string, unknown> = { ...previous };
    for (const [key, value] of Object.entries(row)) if (value !== null && value !== undefined) next[key] = value;
    merged.set(row.id, next as T);
  }
  return sortedBy([...merged.values()], (r) => r.id);
}
