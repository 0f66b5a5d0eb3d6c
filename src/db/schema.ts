/**
 * The SQL contract (docs/sql.md, "Tables"). Table and column names here are part of the product:
 * users query them directly, so renaming one is a breaking change that needs a migration and a note.
 *
 * Ids are `text` everywhere (invariant 6: legacy ids exceed 2^53). Timestamps are `timestamptz`
 * with microseconds. Only `src/mirror/store/` writes the mirrored tables;
 * the history tables also by `src/mirror/history.ts` and two triggers (migration 0010_history_functions).
 */
import { sql } from './orm.js';
import {
  bigint,
  bigserial,
  check,
  boolean,
  customType,
  doublePrecision,
  index,
  integer,
  jsonb,
  pgTable,
  pgView,
  type PgColumn,
  type PgTable,
  primaryKey,
  text,
  timestamp,
  unique,
} from './orm.js';

// Strings, not Date: JS Dates drop the microseconds that order webhook versions (invariant 2).
const tstz = (name: string) => timestamp(name, { withTimezone: true, precision: 6, mode: 'string' });

/**
 * The accounts of the service this deployment mirrors (docs/operations.md, "Several accounts"): one
 * row per declared account, written at start from the settings (`src/db/accounts.ts`). Ids and
 * addresses are only unique within an account, so every mirrored row carries its account, first in
 * its key, and a foreign key here refuses a row of an account that was never declared.
 */
export const accounts = pgTable(
  'accounts',
  {
    name: text('name').primaryKey(),
    /** When the account was first declared (our clock). */
    declaredAt: tstz('declared_at').notNull().defaultNow(),
  },
  (t) => [check('accounts_name_format', sql`${t.name} ~ '^[a-z][a-z0-9_]{0,30}$' and ${t.name} !~ '__'`)],
);

/**
 * Which accounts an analyst's login may read (docs/sql.md, "Roles"): a login with rows here reads
 * rows of those accounts only, through every table, view and function (row-level security, migration
 * 0030); a login with none reads every account. Written by `subscriber-mirror analysts`
 * (`src/db/analyst-accounts.ts`) or by the database owner in SQL. Its reference to the account does
 * not cascade: a limit that vanished with its account would leave a login limited to that account
 * alone reading every account, so the database refuses to remove an account someone is limited to.
 */
export const analystAccounts = pgTable(
  'analyst_accounts',
  {
    /** A login role (a member of `subscriber_mirror_analyst`). */
    role: text('role').notNull(),
    account: text('account')
      .notNull()
      .references(() => accounts.name),
  },
  (t) => [primaryKey({ columns: [t.role, t.account] })],
);

/**
 * The account column of every mirrored table. Its default is the session's account
 * (`mirror_account()`, migration 0029): the service opens one connection pool per account, each
 * connection scoped to its account, so a write can only land in the account it serves, and a session
 * without an account fails loudly instead of guessing. Removing an account removes its rows with it
 * (`accounts remove`, docs/operations.md): a table added later is covered by being declared here,
 * not by a list someone must remember to extend. Analysts' limits are not: see `analystAccounts`.
 */
const accountColumn = () =>
  text('account')
    .notNull()
    .default(sql`mirror_account()`)
    .references(() => accounts.name, { onDelete: 'cascade' });

export const SUBSCRIBER_TYPES = ['active', 'unsubscribed', 'bounced', 'junk', 'unconfirmed'] as const;
export type SubscriberType = (typeof SUBSCRIBER_TYPES)[number];

/** Which path wrote a row: the legacy poll, a webhook, or a read of the current API (docs/upstream-current.md). The stored value `poll` means the
 * legacy API's list read: it names rows users' SQL already filters on, so it stays. */
export const MIRROR_SOURCES = ['poll', 'webhook', 'current'] as const;
export type MirrorSource = (typeof MIRROR_SOURCES)[number];

/**
 * The columns of `subscribers`, declared once. Each one's role is in {@link SUBSCRIBER_COLUMN_ROLES};
 * everything else that names subscriber columns (the past-versions table and the `subscriber_versions`
 * view below, the store's statements, history, erasure, the row types, the benchmarks) derives from
 * the two (`src/db/subscriber-columns.ts`).
 */
const subscriberColumns = {
  account: accountColumn(),
  id: text('id').notNull(),
  email: text('email'),
  name: text('name'),
  status: text('status'),
  source: text('source'),
  sent: integer('sent'),
  opensCount: integer('opens_count'),
  clicksCount: integer('clicks_count'),
  openRate: doublePrecision('open_rate'),
  clickRate: doublePrecision('click_rate'),
  ipAddress: text('ip_address'),
  subscribedAt: tstz('subscribed_at'),
  unsubscribedAt: tstz('unsubscribed_at'),
  createdAt: tstz('created_at'),
  /** Upstream `updated_at` / `date_updated`: the only clock that orders versions (invariant 2). */
  updatedAt: tstz('updated_at'),
  deletedAt: tstz('deleted_at'),
  forgetAt: tstz('forget_at'),
  optedInAt: tstz('opted_in_at'),
  optinIp: text('optin_ip'),
  fields: jsonb('fields')
    .$type<Record<string, string | null>>()
    .notNull()
    .default(sql`'{}'::jsonb`),
  /** Upstream keys we do not map to a column, kept so nothing the service sends is lost. */
  extra: jsonb('extra')
    .$type<Record<string, unknown>>()
    .notNull()
    .default(sql`'{}'::jsonb`),
  mirroredAt: tstz('mirrored_at').notNull().defaultNow(),
  mirroredVia: text('mirrored_via').$type<MirrorSource>().notNull(),
  /**
   * The stored version's place in the order of versions (`versionTime` in src/mirror/version.ts):
   * the latest of `updated_at` and the times of the state it asserts (`unsubscribed_at` when
   * unsubscribed, `deleted_at`). The newer-than guard compares it (invariant 2).
   */
  versionAt: tstz('version_at').notNull(),
};

export const subscribers = pgTable('subscribers', subscriberColumns, (t) => [
  primaryKey({ columns: [t.account, t.id] }),
  index('subscribers_email_idx').on(t.account, sql`lower(${t.email})`),
  index('subscribers_status_idx').on(t.account, t.status),
  index('subscribers_updated_at_idx').on(t.account, t.updatedAt),
]);

/**
 * What a column of `subscribers` is:
 * - `account`: the account it belongs to (the session's: no statement names it);
 * - `key`: the id;
 * - `content`: upstream data that makes a version: a change is a new version, kept in every version
 *   (`subscriber_versions_past`, the `subscriber_versions` view, `subscribers_as_of`);
 * - `latest`: upstream data kept for the latest version only (a change still rewrites the row,
 *   but history does not keep it: rates move with every campaign, and the IPs and `extra` are
 *   personal data history has no use for);
 * - `version`: the version time (`version_at`);
 * - `bookkeeping`: ours, not upstream's (`mirrored_at`, `mirrored_via`).
 *
 * `personal`: erased when the subscriber is forgotten or erased, in every version that keeps it
 * (a forgotten subscriber keeps its id, status, counters and timestamps). `merge`: a jsonb object
 * merged key by key into the stored one instead of replacing it.
 */
export type SubscriberColumnRole = 'account' | 'key' | 'content' | 'latest' | 'version' | 'bookkeeping';

export interface SubscriberColumnInfo {
  readonly role: SubscriberColumnRole;
  readonly personal?: true;
  readonly merge?: true;
}

/**
 * The role of every column of `subscribers`. The `satisfies` makes it exhaustive: a column added to
 * the table without a role here does not compile. `extra` is personal whole: its keys are unknown to
 * us, so none can be vouched for as non-personal (e.g. legacy `user_agent`).
 */
export const SUBSCRIBER_COLUMN_ROLES = {
  account: { role: 'account' },
  id: { role: 'key' },
  email: { role: 'content', personal: true },
  name: { role: 'content', personal: true },
  status: { role: 'content' },
  source: { role: 'content' },
  sent: { role: 'content' },
  opensCount: { role: 'content' },
  clicksCount: { role: 'content' },
  openRate: { role: 'latest' },
  clickRate: { role: 'latest' },
  ipAddress: { role: 'latest', personal: true },
  subscribedAt: { role: 'content' },
  unsubscribedAt: { role: 'content' },
  createdAt: { role: 'content' },
  updatedAt: { role: 'content' },
  deletedAt: { role: 'content' },
  forgetAt: { role: 'content' },
  optedInAt: { role: 'latest' },
  optinIp: { role: 'latest', personal: true },
  fields: { role: 'content', personal: true, merge: true },
  extra: { role: 'latest', personal: true, merge: true },
  mirroredAt: { role: 'bookkeeping' },
  mirroredVia: { role: 'bookkeeping' },
  versionAt: { role: 'version' },
} as const satisfies Record<keyof typeof subscribers.$inferSelect, SubscriberColumnInfo>;

type Roles = typeof SUBSCRIBER_COLUMN_ROLES;
/** Keys (drizzle names) of the `subscribers` columns whose role is `R`. */
export type SubscriberKeyOfRole<R extends SubscriberColumnRole> = {
  [K in keyof Roles]: Roles[K]['role'] extends R ? K : never;
}[keyof Roles];
/** The content columns: what makes a version, kept in every version. */
export type SubscriberContentKey = SubscriberKeyOfRole<'content'>;

/** Keys of the columns whose role is one of `roles`, in table order. */
export function subscriberKeysOfRole<R extends SubscriberColumnRole>(...roles: R[]): SubscriberKeyOfRole<R>[] {
  return (Object.keys(subscriberColumns) as (keyof Roles)[]).filter((k) =>
    (roles as SubscriberColumnRole[]).includes(SUBSCRIBER_COLUMN_ROLES[k].role),
  ) as SubscriberKeyOfRole<R>[];
}

const SUBSCRIBER_CONTENT_KEYS = subscriberKeysOfRole('content');

/** The SQL names of the content columns, in table order (as the view and the past table list them). */
export const SUBSCRIBER_CONTENT_COLUMNS: readonly string[] = SUBSCRIBER_CONTENT_KEYS.map((k) => subscribers[k].name);

/** The content column builders (shared with the past-versions table, whose columns they are too). */
const subscriberContentColumns = Object.fromEntries(SUBSCRIBER_CONTENT_KEYS.map((k) => [k, subscriberColumns[k]])) as Pick<
  typeof subscriberColumns,
  SubscriberContentKey
>;

/**
 * History (docs/sql.md, "History"): every version of a subscriber the mirror has seen except the current one,
 * which is the `subscribers` row itself (`version_at` is its time). Written by `src/mirror/history.ts`
 * in the transaction of the subscriber upsert: when the upsert replaces a row, the row it replaced
 * moves here; a version that arrives late goes here directly. `valid_from` is the version's time in
 * the version order (`version_at`). Users read history through the `subscriber_versions` view, which
 * adds the current rows and `valid_to` (the next version's `valid_from`; null for the current one).
 * Nothing is ever updated in place to close a version, and a fresh subscriber costs no history
 * write at all: that keeps the upsert fast.
 *
 * `updated_at` is content like in `subscribers`: a version whose `updated_at` moved is a new
 * version, which keeps the timeline the same whatever order versions arrive in.
 */
export const subscriberVersionsPast = pgTable(
  'subscriber_versions_past',
  {
    account: accountColumn(),
    subscriberId: text('subscriber_id').notNull(),
    validFrom: tstz('valid_from').notNull(),
    via: text('via').$type<MirrorSource>().notNull(),
    /** Our clock, when the mirror learned this version. */
    recordedAt: tstz('recorded_at').notNull().defaultNow(),
    ...subscriberContentColumns,
  },
  (t) => [primaryKey({ columns: [t.account, t.subscriberId, t.validFrom] })],
);

/**
 * History of `group_members`: one row per period of membership, kept by a trigger on
 * `group_members` so every path that starts or ends a membership is followed. Leaving and re-joining
 * makes a new period.
 */
export const groupMembershipPeriods = pgTable(
  'group_membership_periods',
  {
    account: accountColumn(),
    groupId: text('group_id').notNull(),
    subscriberId: text('subscriber_id').notNull(),
    /** The type the member was last listed under during the period. */
    type: text('type'),
    startedAt: tstz('started_at').notNull(),
    /** Null while a member. */
    endedAt: tstz('ended_at'),
  },
  (t) => [
    primaryKey({ columns: [t.account, t.groupId, t.subscriberId, t.startedAt] }),
    index('group_membership_periods_subscriber_idx').on(t.account, t.subscriberId),
  ],
);

/** One row: whether history is recorded (HISTORY), written by the service at start. */
export const historySettings = pgTable('history_settings', {
  id: boolean('id').primaryKey().default(true),
  enabled: boolean('enabled').notNull().default(true),
});

export const groups = pgTable(
  'groups',
  {
    account: accountColumn(),
    id: text('id').notNull(),
    name: text('name'),
    mirroredAt: tstz('mirrored_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.account, t.id] })],
);

export const groupMembers = pgTable(
  'group_members',
  {
    account: accountColumn(),
    groupId: text('group_id').notNull(),
    subscriberId: text('subscriber_id').notNull(),
    /** The subscriber type the member was listed under (poll) or its status (webhook). */
    type: text('type'),
    addedAt: tstz('added_at'),
    /** Null while a member. Set by a removal event or by a complete full pass that no longer lists it. */
    removedAt: tstz('removed_at'),
    /** Upstream time of the newest membership fact applied; orders add/remove events (invariant 2). */
    sourceUpdatedAt: tstz('source_updated_at'),
    /** When a full pass last listed this member; members not seen by a complete full pass are removed. */
    lastSeenAt: tstz('last_seen_at'),
    mirroredAt: tstz('mirrored_at').notNull().defaultNow(),
    mirroredVia: text('mirrored_via').$type<MirrorSource>().notNull(),
    /**
     * The `sync_passes` row whose removal rule ended this membership (its `proof` lists the passes
     * that proved it: docs/sql.md, "Why was a member ended"); null while a member or when an event ended it.
     */
    endedBy: bigint('ended_by', { mode: 'number' }),
  },
  (t) => [
    primaryKey({ columns: [t.account, t.groupId, t.subscriberId] }),
    index('group_members_subscriber_idx').on(t.account, t.subscriberId),
    index('group_members_current_idx')
      .on(t.account, t.groupId, t.type)
      .where(sql`${t.removedAt} is null`),
  ],
);

export const campaigns = pgTable(
  'campaigns',
  {
    account: accountColumn(),
    id: text('id').notNull(),
    name: text('name'),
    totalRecipients: integer('total_recipients'),
    previewUrl: text('preview_url'),
    /** The campaign `date` from payloads. */
    date: tstz('date'),
    sentAt: tstz('sent_at'),
    mirroredAt: tstz('mirrored_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.account, t.id] })],
);

export const automations = pgTable(
  'automations',
  {
    account: accountColumn(),
    id: text('id').notNull(),
    name: text('name'),
    mirroredAt: tstz('mirrored_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.account, t.id] })],
);

export const subscriberActivity = pgTable(
  'subscriber_activity',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    account: accountColumn(),
    kind: text('kind').notNull(),
    subscriberId: text('subscriber_id'),
    groupId: text('group_id'),
    automationId: text('automation_id'),
    campaignId: text('campaign_id'),
    linkUrl: text('link_url'),
    /**
     * When the event reached us: the receipt time of the delivery carrying it
     * (`webhook_deliveries.received_at`). Payloads carry no event time, so for an open or a click
     * this is the best time the service gives (a batch can hold up to a minute of events).
     */
    occurredAt: tstz('occurred_at'),
    /** The subscriber's `updated_at` in the event (an open or a click does not move it). */
    subscriberUpdatedAt: tstz('subscriber_updated_at'),
    deliveryId: bigint('delivery_id', { mode: 'bigint' }),
    /** Position of the event in its delivery (0 for an unbatched one). */
    itemIndex: integer('item_index'),
    mirroredAt: tstz('mirrored_at').notNull().defaultNow(),
  },
  (t) => [
    // Each item of each delivery is one row: the same delivery bytes are one inbox row (deduped by
    // body hash), so applying them again collapses here, while two identical items are two events.
    // Subscriber facts (every kind but opens and clicks) also collapse on their natural key, which
    // names the subscriber version they produced: unique index `subscriber_activity_fact_key`
    // (account, kind, subscriber, group, automation, campaign, link, subscriber_updated_at; nulls
    // equal; partial), created by the hand-written migrations 0003 and 0029 because drizzle cannot declare it.
    unique('subscriber_activity_delivery_item').on(t.account, t.deliveryId, t.itemIndex),
    index('subscriber_activity_subscriber_idx').on(t.account, t.subscriberId, t.occurredAt),
    index('subscriber_activity_campaign_idx').on(t.account, t.campaignId, t.kind),
  ],
);

/**
 * Personal data in `subscriber_activity`, per column (exhaustive, like {@link SUBSCRIBER_COLUMN_ROLES}):
 * `link-query` marks a link whose query string can carry the subscriber's data (`?email=…`); ids,
 * kinds and times are not personal. Erasing link query strings of erased subscribers is docs/security.md's
 * (no code erases them yet); this is where it reads which columns to clear.
 */
export const SUBSCRIBER_ACTIVITY_PERSONAL = {
  id: false,
  account: false,
  kind: false,
  subscriberId: false,
  groupId: false,
  automationId: false,
  campaignId: false,
  linkUrl: 'link-query',
  occurredAt: false,
  subscriberUpdatedAt: false,
  deliveryId: false,
  itemIndex: false,
  mirroredAt: false,
} as const satisfies Record<keyof typeof subscriberActivity.$inferSelect, false | 'link-query'>;

export const SYNC_RUN_STATUSES = ['running', 'succeeded', 'failed'] as const;
export type SyncRunStatus = (typeof SYNC_RUN_STATUSES)[number];

/** A poll pass: incremental (by date filter) or full (every page; the only kind that proves removals). */
export const PASS_MODES = ['incremental', 'full'] as const;
export type PassMode = (typeof PASS_MODES)[number];

/** A row of the pass history: a pass of either mode, or a check of removal candidates one request each (current source). */
export const PASS_KINDS = [...PASS_MODES, 'check'] as const;
export type PassKind = (typeof PASS_KINDS)[number];

/** Where a pass read: the legacy v2 API or the current platform's (docs/architecture.md, "Read sources"). */
export const READ_SOURCES = ['legacy', 'current'] as const;
export type ReadSourceName = (typeof READ_SOURCES)[number];

/** Why a pass ran: its schedule, a backfill, the resume of an open pass, or the removal proof of another pass. */
export const PASS_TRIGGERS = ['schedule', 'backfill', 'resume', 'proof'] as const;
export type PassTrigger = (typeof PASS_TRIGGERS)[number];

/**
 * The pass history (docs/architecture.md, "Pass history and the removal rule"): one row per run of
 * a pass or check of one (group, type), inserted when it starts and closed once when it ends, never
 * changed after. The removal rule, status, last success and staleness all read these rows.
 * Written by `src/sync/pass-history.ts` only; pruned after `PASS_HISTORY_RETENTION`, except the
 * rows the removal rule still needs.
 */
export const syncPasses = pgTable(
  'sync_passes',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    account: accountColumn(),
    groupId: text('group_id').notNull(),
    type: text('type').$type<SubscriberType>().notNull(),
    kind: text('kind').$type<PassKind>().notNull(),
    source: text('source').$type<ReadSourceName>().notNull(),
    trigger: text('trigger').$type<PassTrigger>(),
    /** When this run started. */
    startedAt: tstz('started_at').notNull().defaultNow(),
    /** Full pass: when its listing began (the `last_seen_at` it stamps); a resumed pass keeps the start it was first opened with. */
    listedFrom: tstz('listed_from'),
    /** Null while it runs (or when the process running it died). */
    endedAt: tstz('ended_at'),
    status: text('status').$type<SyncRunStatus>().notNull(),
    /** Full pass: it read its list to the end. */
    complete: boolean('complete').notNull().default(false),
    /** Full pass: every page joined the one before it, so it skipped no member that held still. */
    gapFree: boolean('gap_free'),
    /** Incremental pass: the earliest change time it certainly read (its date filter less the timezone margin): a sweep since then. */
    readSince: tstz('read_since'),
    rowsSeen: integer('rows_seen').notNull().default(0),
    rowsWritten: integer('rows_written').notNull().default(0),
    requests: integer('requests').notNull().default(0),
    /** Memberships the removal rule ended when this row was recorded. */
    removed: integer('removed').notNull().default(0),
    /** The rows the removal rule counted when it ended them: the proof of every membership whose `ended_by` is this row. */
    proof: bigint('proof', { mode: 'number' }).array(),
    /** The service's count of the list, read by this pass. */
    upstreamCount: integer('upstream_count'),
    /** Rows dated after the service's now + the timezone margin (stored; the cursor did not follow them). */
    futureRows: integer('future_rows').notNull().default(0),
    /** Full pass: requests spent stepping back (the list moved by more than the page overlap). */
    stepBacks: integer('step_backs').notNull().default(0),
    /** Full pass: pages it could not join to the one before. */
    gaps: integer('gaps').notNull().default(0),
    error: text('error'),
  },
  (t) => [index('sync_passes_pair_idx').on(t.account, t.groupId, t.type, t.id)],
);

/**
 * What a pass of one (group, type) resumes from, and nothing else: the incremental cursor and the open
 * full pass's checkpoint (invariant 3). What passes did is the history (`sync_passes`); the status
 * users read is the view `sync_status`. Written by `src/sync/state.ts` only.
 */
export const syncState = pgTable(
  'sync_state',
  {
    account: accountColumn(),
    groupId: text('group_id').notNull(),
    type: text('type').$type<SubscriberType>().notNull(),
    /** Max upstream version time committed by a pass (invariant 3); incremental passes read from it. */
    cursor: tstz('cursor'),
    /** Which source opened the open full pass (null: none is open): its position is `full_offset` (legacy) or `full_cursor` and `full_pages` (current). */
    fullSource: text('full_source').$type<ReadSourceName>(),
    /** When the open full pass was first opened: the `last_seen_at` its pages stamp, also after a resume. */
    fullStartedAt: tstz('full_started_at'),
    /** Legacy: the row offset of the open full pass's next page. */
    fullOffset: integer('full_offset'),
    /** Legacy: ids at the end of the last committed page, which the first page after a resume must join. */
    fullTailIds: text('full_tail_ids').array(),
    /** Legacy: false once the open full pass met a page it could not join to the one before (it may have skipped rows). */
    fullContinuous: boolean('full_continuous'),
    /** Current API: the service's cursor of the open full pass's next page (null: its first page). */
    fullCursor: text('full_cursor'),
    /** Current API: pages the open full pass has committed. */
    fullPages: integer('full_pages'),
    updatedAt: tstz('updated_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.account, t.groupId, t.type] })],
);

/**
 * Per (group, type): the cursor and what the history says of its last run, last success, last
 * complete full pass and the service's last count (docs/sql.md). The column names are those the
 * `sync_state` table had before the history replaced them (migration 0022).
 */
export const syncStatus = pgView('sync_status', {
  account: text('account').notNull(),
  groupId: text('group_id').notNull(),
  type: text('type').$type<SubscriberType>().notNull(),
  cursor: tstz('cursor'),
  lastMode: text('last_mode').$type<PassMode>(),
  lastStatus: text('last_status').$type<SyncRunStatus>(),
  lastRunStartedAt: tstz('last_run_started_at'),
  lastRunFinishedAt: tstz('last_run_finished_at'),
  lastSuccessAt: tstz('last_success_at'),
  lastError: text('last_error'),
  rowsLastRun: integer('rows_last_run'),
  rowsSeenLastRun: integer('rows_seen_last_run'),
  requestsLastRun: integer('requests_last_run'),
  futureRowsLastRun: integer('future_rows_last_run'),
  lastFullCompletedAt: tstz('last_full_completed_at'),
  stepBacksLastFull: integer('step_backs_last_full'),
  upstreamCount: integer('upstream_count'),
  upstreamCountAt: tstz('upstream_count_at'),
  /** A full pass is open (a crash or a stop left its checkpoint; it resumes from there). */
  fullPassOpen: boolean('full_pass_open').notNull(),
  /** Legacy: the open full pass's next row offset; current: the pages it committed. */
  fullPassAt: integer('full_pass_at'),
}).with({ securityInvoker: true }).as(sql`
select s.account, s.group_id, s.type, s.cursor,
       l.kind as last_mode, l.status as last_status, l.started_at as last_run_started_at, l.ended_at as last_run_finished_at,
       ok.ended_at as last_success_at, l.error as last_error,
       l.rows_written as rows_last_run, l.rows_seen as rows_seen_last_run, l.requests as requests_last_run,
       l.future_rows as future_rows_last_run,
       f.ended_at as last_full_completed_at, f.step_backs as step_backs_last_full,
       c.upstream_count, c.started_at as upstream_count_at,
       s.full_source is not null as full_pass_open,
       coalesce(s.full_offset, s.full_pages) as full_pass_at
from sync_state s
left join lateral (
  select p.kind, p.status, p.started_at, p.ended_at, p.error, p.rows_written, p.rows_seen, p.requests, p.future_rows
    from sync_passes p
   where p.account = s.account and p.group_id = s.group_id and p.type = s.type and p.kind <> 'check'
   order by p.id desc limit 1) l on true
left join lateral (
  select p.ended_at from sync_passes p
   where p.account = s.account and p.group_id = s.group_id and p.type = s.type and p.kind <> 'check' and p.status = 'succeeded'
   order by p.id desc limit 1) ok on true
left join lateral (
  select p.ended_at, p.step_backs from sync_passes p
   where p.account = s.account and p.group_id = s.group_id and p.type = s.type and p.kind = 'full' and p.complete
   order by p.id desc limit 1) f on true
left join lateral (
  select p.upstream_count, p.started_at from sync_passes p
   where p.account = s.account and p.group_id = s.group_id and p.type = s.type and p.upstream_count is not null
   order by p.id desc limit 1) c on true`);

/**
 * What this install knows about the service's silent page cap (docs/upstream.md, "Legacy lists"): one row per
 * account, because the cap is the service's, not a group's. Written by the poller only.
 */
export const upstreamPaging = pgTable(
  'upstream_paging',
  {
    account: accountColumn().primaryKey(),
    /** The learned cap; null while none is known. */
    pageCap: integer('page_cap'),
    /** The longest page the service ever served. */
    longestPage: integer('longest_page').notNull().default(0),
    candidateLength: integer('candidate_length'),
    candidateList: text('candidate_list'),
    updatedAt: tstz('updated_at').notNull().defaultNow(),
  },
  () => [],
);

// ---------------------------------------------------------------------------------------------
// The audit (docs/operations.md, "The audit"): written by `src/audit/state.ts` only

/** A mirror member the audit's sample did not list, as first seen: confirmed extra when nothing newer about it arrived by the next check. */
export interface PendingExtra {
  id: string;
  /** Its membership fact when seen (null: none). */
  factAt: string | null;
}

/** What the audit finds wrong with a managed webhook it read back (`audit_webhooks.problems`). */
export const WEBHOOK_PROBLEMS = ['missing', 'disabled', 'wrong-url', 'missing-events'] as const;
export type WebhookProblem = (typeof WEBHOOK_PROBLEMS)[number];

/** Per (group, type): where the audit's sample reads next, and what it saw that a later tick must check again. */
export const auditState = pgTable(
  'audit_state',
  {
    account: accountColumn(),
    groupId: text('group_id').notNull(),
    type: text('type').notNull(),
    /** Legacy: the offset the next sample reads at (it advances each tick and wraps). */
    sampleOffset: integer('sample_offset').notNull().default(0),
    /** Current: the service's cursor of the next sample page (null: the list's first page). */
    sampleCursor: text('sample_cursor'),
    /** Current: the last id of the previous sample page, where the next page's id range starts. */
    sampleAfterId: text('sample_after_id'),
    /** The service's count read at `pending_count_at`, checked once the mirror had time to catch up. */
    pendingCount: integer('pending_count'),
    pendingCountAt: tstz('pending_count_at'),
    /** Mirror members the service did not list, checked again with the count. */
    pendingExtras: jsonb('pending_extras').$type<PendingExtra[]>(),
    /** When a tick last audited this pair (replicas claim a tick by moving it). */
    lastAuditAt: tstz('last_audit_at'),
    lastError: text('last_error'),
    /** When the audit last asked for a full pass of this pair (at most one per audit period). */
    fullPassAskedAt: tstz('full_pass_asked_at'),
    updatedAt: tstz('updated_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.account, t.groupId, t.type] })],
);

/** One row per audit of a (group, type): what it checked, found and repaired (the accuracy figure sums the last 24 h). */
export const auditResults = pgTable(
  'audit_results',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    account: accountColumn(),
    groupId: text('group_id').notNull(),
    type: text('type').notNull(),
    at: tstz('at').notNull().defaultNow(),
    rowsChecked: integer('rows_checked').notNull(),
    inFlight: integer('in_flight').notNull(),
    content: integer('content').notNull(),
    missing: integer('missing').notNull(),
    extra: integer('extra').notNull(),
    count: integer('count').notNull(),
    repaired: integer('repaired').notNull(),
    /** Mismatches a repair did not fix (a write the guard refused, a count gap after the full pass it asked for). */
    unrepaired: integer('unrepaired').notNull(),
    missedDeliveries: integer('missed_deliveries').notNull(),
  },
  (t) => [index('audit_results_at_idx').on(t.account, t.at), index('audit_results_pair_idx').on(t.account, t.groupId, t.type, t.at)],
);

/** The service-side webhooks as the audit last read them back: what is wrong with each, if anything. */
export const auditWebhooks = pgTable(
  'audit_webhooks',
  {
    account: accountColumn(),
    /** The service-side webhook id (a row of `webhook_endpoints`). */
    id: text('id').notNull(),
    /** Null when the service no longer has it. */
    enabled: boolean('enabled'),
    /** Problems found, of {@link WEBHOOK_PROBLEMS} (empty when healthy). */
    problems: text('problems').array().$type<WebhookProblem[]>().notNull(),
    missingEvents: text('missing_events').array().notNull(),
    checkedAt: tstz('checked_at').notNull(),
    /** When the audit last re-enabled it (WEBHOOKS_REENABLE). */
    reenabledAt: tstz('reenabled_at'),
  },
  (t) => [primaryKey({ columns: [t.account, t.id] })],
);

export const DELIVERY_STATUSES = ['pending', 'applied', 'failed', 'ignored'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    id: bigserial('id', { mode: 'bigint' }).primaryKey(),
    /** The account whose path the delivery came in on, verified with that account's secrets only. */
    account: accountColumn(),
    /** SHA-256 (hex) of the raw body: deliveries carry no id, so the body is the dedupe key (within an account). */
    bodySha256: text('body_sha256').notNull(),
    body: jsonb('body').notNull(),
    kinds: text('kinds')
      .array()
      .notNull()
      .default(sql`'{}'::text[]`),
    eventCount: integer('event_count').notNull().default(0),
    endpointId: text('endpoint_id'),
    status: text('status').$type<DeliveryStatus>().notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    error: text('error'),
    receivedAt: tstz('received_at').notNull().defaultNow(),
    appliedAt: tstz('applied_at'),
    updatedAt: tstz('updated_at').notNull().defaultNow(),
    /**
     * A pending delivery whose last apply failed is not claimed again before this time (the
     * consumer's backoff); null: due now.
     */
    nextAttemptAt: tstz('next_attempt_at'),
    /** Failed applies since the row last became pending (receipt or replay): the last allowed one marks it failed. */
    tries: integer('tries').notNull().default(0),
  },
  (t) => [
    unique('webhook_deliveries_body_sha256_key').on(t.account, t.bodySha256),
    index('webhook_deliveries_status_idx').on(t.account, t.status, t.receivedAt),
  ],
);

/**
 * The dedupe keys of purged deliveries (docs/security.md, "Personal data and erasure"): a delivery's body goes at its retention, its hash
 * stays here, so the same bytes replayed later (a captured delivery) are recognised as a duplicate
 * and not stored again. No body, no personal data: 32 bytes of hash, the id and status it had.
 */
/** Raw bytes (a hash kept as 32 bytes rather than 64 hex characters: the table only grows). */
const bytea = customType<{ data: Buffer; driverData: Buffer }>({ dataType: () => 'bytea' });

export const webhookDeliveryHashes = pgTable(
  'webhook_delivery_hashes',
  {
    account: accountColumn(),
    bodySha256: bytea('body_sha256').notNull(),
    deliveryId: bigint('delivery_id', { mode: 'bigint' }).notNull(),
    status: text('status').$type<DeliveryStatus>().notNull(),
    receivedAt: tstz('received_at').notNull(),
    purgedAt: tstz('purged_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.account, t.bodySha256] })],
);

export const webhookEndpoints = pgTable(
  'webhook_endpoints',
  {
    account: accountColumn(),
    /** The service-side webhook id (docs/upstream.md, "Webhook object"). */
    id: text('id').notNull(),
    name: text('name'),
    url: text('url').notNull(),
    events: text('events').array().notNull(),
    enabled: boolean('enabled').notNull().default(true),
    batchable: boolean('batchable').notNull().default(false),
    /** Signs deliveries (docs/upstream.md, "Signature"). Never logged. */
    secret: text('secret').notNull(),
    createdAt: tstz('created_at').notNull().defaultNow(),
    updatedAt: tstz('updated_at').notNull().defaultNow(),
    /**
     * Taken over with `webhooks adopt` (made elsewhere, e.g. in the service's dashboard, and only meant
     * to be verified) rather than created by `webhooks register`, which must never claim, update or
     * delete such a webhook (docs/operations.md, "Command line"). Set when the row is inserted, never
     * changed afterwards, so the two kinds of rows cannot turn into each other.
     */
    adopted: boolean('adopted').notNull().default(false),
    /**
     * Disabled by an operator (`webhooks update --disable`), not by the service: WEBHOOKS_REENABLE leaves
     * it disabled (docs/operations.md, "The audit"). Cleared when it is enabled again, by whoever.
     */
    disabledByOperator: boolean('disabled_by_operator').notNull().default(false),
  },
  (t) => [primaryKey({ columns: [t.account, t.id] })],
);

/**
 * What the analyst role may not read (docs/security.md, "Database roles"): a whole table, or a column
 * of a table the migrations grant column by column, every other column granted. A webhook secret can
 * forge deliveries, a stored body is raw personal data, the dedupe hashes are the service's business.
 * `test/integration/registry.catalog.test.ts` compares the migrations' grants with this list, so a
 * column added to one of these tables fails there until a migration grants it or it is listed here.
 */
export const ANALYST_UNREADABLE: readonly (PgTable | PgColumn)[] = [webhookDeliveryHashes, webhookDeliveries.body, webhookEndpoints.secret];

// ---------------------------------------------------------------------------------------------
// Views: the common questions, answered once (docs/sql.md, "Views"). Their names and columns are part of
// the SQL contract like the tables' (docs/sql.md). Each is a plain view over the
// mirrored tables, so it is always current and costs nothing to keep; the definitions are written as
// SQL, not built from the table objects, because users read them back with `\d+ <view>`.

/**
 * Who is in each group right now: memberships not ended (`removed_at` null) of subscribers not
 * deleted upstream. `status` is the subscriber's own status; `type` is the type the group listed the
 * member under (poll) or its status when added (webhook). Left joins: a group whose name never came
 * in a payload (poll-only groups) still lists its members, with a null `group_name`.
 */
export const currentGroupMembers = pgView('current_group_members', {
  account: text('account'),
  groupId: text('group_id'),
  groupName: text('group_name'),
  subscriberId: text('subscriber_id'),
  email: text('email'),
  name: text('name'),
  status: text('status'),
  type: text('type'),
  addedAt: tstz('added_at'),
}).with({ securityInvoker: true }).as(sql`
select gm.account, gm.group_id, g.name as group_name, gm.subscriber_id, s.email, s.name, s.status, gm.type, gm.added_at
from group_members gm
left join groups g on g.account = gm.account and g.id = gm.group_id
left join subscribers s on s.account = gm.account and s.id = gm.subscriber_id
where gm.removed_at is null
  and s.deleted_at is null`);

/**
 * One row per campaign in `campaigns`, with its recorded opens and clicks (`subscriber_activity`
 * rows of kind `campaign.open` / `campaign.click`; duplicates already collapsed, invariant 5).
 * Rates are percentages with two decimals, the scale the service uses for `subscribers.open_rate`,
 * of unique openers / clickers over `total_recipients`; null when that is unknown or zero.
 * `sent_at` falls back to the campaign `date` of open/click payloads when no `campaign.sent` was seen.
 */
export const campaignEngagement = pgView('campaign_engagement', {
  account: text('account'),
  campaignId: text('campaign_id'),
  campaignName: text('campaign_name'),
  sentAt: tstz('sent_at'),
  totalRecipients: integer('total_recipients'),
  uniqueOpeners: integer('unique_openers'),
  uniqueClickers: integer('unique_clickers'),
  openEvents: integer('open_events'),
  clickEvents: integer('click_events'),
  openRate: doublePrecision('open_rate'),
  clickRate: doublePrecision('click_rate'),
}).with({ securityInvoker: true }).as(sql`
select c.account,
       c.id as campaign_id,
       c.name as campaign_name,
       coalesce(c.sent_at, c.date) as sent_at,
       c.total_recipients,
       coalesce(a.unique_openers, 0) as unique_openers,
       coalesce(a.unique_clickers, 0) as unique_clickers,
       coalesce(a.open_events, 0) as open_events,
       coalesce(a.click_events, 0) as click_events,
       round(100.0 * coalesce(a.unique_openers, 0) / nullif(c.total_recipients, 0), 2)::float8 as open_rate,
       round(100.0 * coalesce(a.unique_clickers, 0) / nullif(c.total_recipients, 0), 2)::float8 as click_rate
from campaigns c
left join (
  select account, campaign_id,
         (count(distinct subscriber_id) filter (where kind = 'campaign.open'))::int as unique_openers,
         (count(distinct subscriber_id) filter (where kind = 'campaign.click'))::int as unique_clickers,
         (count(*) filter (where kind = 'campaign.open'))::int as open_events,
         (count(*) filter (where kind = 'campaign.click'))::int as click_events
  from subscriber_activity
  where campaign_id is not null and kind in ('campaign.open', 'campaign.click')
  group by account, campaign_id
) a on a.account = c.account and a.campaign_id = c.id`);

/**
 * Subscribers whose upstream `updated_at` (the service's clock, never ours: invariant 2) is within
 * the last 24 hours of the query's `now()`, deleted ones included (a deletion is a change).
 */
export const recentlyChangedSubscribers = pgView('recently_changed_subscribers', {
  account: text('account'),
  id: text('id'),
  email: text('email'),
  status: text('status'),
  updatedAt: tstz('updated_at'),
  mirroredVia: text('mirrored_via').$type<MirrorSource>(),
}).with({ securityInvoker: true }).as(sql`
select account, id, email, status, updated_at, mirrored_via
from subscribers
where updated_at >= now() - interval '1 day'`);

// ---------------------------------------------------------------------------------------------
// Custom field definitions (docs/sql.md, "Custom fields as columns"): what the service says each key
// of `subscribers.fields` is. Written by `src/mirror/store/fields.ts` only, which rebuilds the view
// `subscriber_fields` (one typed column per field) whenever they change.

/** The types the service gives a custom field (docs/upstream.md, "Field definitions"). */
export const FIELD_TYPES = ['text', 'number', 'date'] as const;
export type FieldType = (typeof FIELD_TYPES)[number];

export const fields = pgTable(
  'fields',
  {
    account: accountColumn(),
    /** The key of the value in `subscribers.fields`, and the column's name in `subscriber_fields`. */
    key: text('key').notNull(),
    title: text('title'),
    type: text('type').$type<FieldType>().notNull(),
    /** The service's id of the field. */
    upstreamId: text('upstream_id'),
    /** When the definition was last read from the service (our clock). */
    mirroredAt: tstz('mirrored_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.account, t.key] })],
);

/**
 * Who must not be mailed (docs/sql.md, "Suppressions"): one row per address (per subscriber id for
 * an erased subscriber, whose address is gone) with the strongest reason: `forgotten` (erased on
 * request, by the service's forget or by `subscriber-mirror erase`), `spam_complaint`, `bounced`,
 * `junk`, `unsubscribed`; `since` is when that started as the service dated it, `learned_via` the path
 * that brought it (`poll`, `webhook`, `current`, or `erase` for the command).
 */
export const suppressions = pgView('suppressions', {
  account: text('account'),
  email: text('email'),
  subscriberId: text('subscriber_id'),
  reason: text('reason'),
  since: tstz('since'),
  learnedVia: text('learned_via'),
}).with({ securityInvoker: true }).as(sql`
select distinct on (r.account, coalesce(lower(r.email), r.subscriber_id))
       r.account, r.email, r.subscriber_id, r.reason, r.since, r.learned_via
from (
  select e.account, null::text as email, e.subscriber_id, 'forgotten'::text as reason, e.erased_at as since,
         case e.reason when 'request' then 'erase' else coalesce(s.mirrored_via, 'webhook') end as learned_via, 1 as strength
    from erasures e
    left join subscribers s on s.account = e.account and s.id = e.subscriber_id
   where e.reason in ('forget', 'request')
  union all
  select a.account, s.email, a.subscriber_id, 'spam_complaint', min(a.occurred_at), 'webhook', 2
    from subscriber_activity a
    join subscribers s on s.account = a.account and s.id = a.subscriber_id
   where a.kind = 'subscriber.spam_reported'
     and not exists (select 1 from erasures e
                      where e.account = a.account and e.subscriber_id = a.subscriber_id and e.reason in ('forget', 'request'))
   group by a.account, s.email, a.subscriber_id
  union all
  select s.account, s.email, s.id, s.status,
         coalesce(case when s.status = 'unsubscribed' then s.unsubscribed_at end, run.since, s.version_at),
         coalesce(run.via, s.mirrored_via), case s.status when 'bounced' then 3 when 'junk' then 4 else 5 end
    from subscribers s
    left join lateral (
      select min(v.valid_from) as since, (array_agg(v.via order by v.valid_from))[1] as via
        from subscriber_versions v
       where v.account = s.account and v.subscriber_id = s.id and v.status = s.status
         and v.valid_from > coalesce((select max(w.valid_from) from subscriber_versions w
                                       where w.account = s.account and w.subscriber_id = s.id
                                         and w.status is distinct from s.status), '-infinity')
    ) run on true
   where s.status in ('unsubscribed', 'bounced', 'junk')
     and not exists (select 1 from erasures e
                      where e.account = s.account and e.subscriber_id = s.id and e.reason in ('forget', 'request'))
) r
order by r.account, coalesce(lower(r.email), r.subscriber_id), r.strength, r.since`);

/**
 * Per (group, type): the mirror's live members beside the service's last count and when it was read
 * (by a pass or by the audit, whichever is newer), and the last audit's accuracy (docs/sql.md,
 * "Group figures").
 */
export const groupStats = pgView('group_stats', {
  account: text('account'),
  groupId: text('group_id'),
  groupName: text('group_name'),
  type: text('type'),
  mirrorMembers: integer('mirror_members'),
  serviceCount: integer('service_count'),
  serviceCountAt: tstz('service_count_at'),
  difference: integer('difference'),
  lastAuditAt: tstz('last_audit_at'),
  lastAuditRowsChecked: integer('last_audit_rows_checked'),
  lastAuditAccuracy: doublePrecision('last_audit_accuracy'),
}).with({ securityInvoker: true }).as(sql`
select k.account, k.group_id, g.name as group_name, k.type,
       coalesce(m.members, 0) as mirror_members,
       c.count as service_count, c.at as service_count_at,
       c.count - coalesce(m.members, 0) as difference,
       r.at as last_audit_at, r.rows_checked as last_audit_rows_checked,
       case when r.rows_checked > 0
            then greatest(0, (r.rows_checked - r.content - r.missing - r.extra)::float8 / r.rows_checked) end as last_audit_accuracy
from (select account, group_id, type from sync_state
      union select account, group_id, type from audit_state
      union select account, group_id, type from group_members where removed_at is null and type is not null) k
left join groups g on g.account = k.account and g.id = k.group_id
left join lateral (
  select count(*)::int as members from group_members gm
   where gm.account = k.account and gm.group_id = k.group_id and gm.type = k.type and gm.removed_at is null) m on true
left join lateral (
  select n.count, n.at from (
    select p.upstream_count as count, p.started_at as at from sync_passes p
     where p.account = k.account and p.group_id = k.group_id and p.type = k.type and p.upstream_count is not null
    union all
    select a.pending_count, a.pending_count_at from audit_state a
     where a.account = k.account and a.group_id = k.group_id and a.type = k.type and a.pending_count is not null
  ) n order by n.at desc limit 1) c on true
left join lateral (
  select ar.at, ar.rows_checked, ar.content, ar.missing, ar.extra from audit_results ar
   where ar.account = k.account and ar.group_id = k.group_id and ar.type = k.type
   order by ar.at desc, ar.id desc limit 1) r on true`);

// ---------------------------------------------------------------------------------------------
// Erasure log (docs/security.md, "Personal data and erasure"): whose personal data the service erased and why, so the
// stored deliveries that carry it are redacted once. Ids only: it holds no personal data itself.

/**
 * `forget`: the service forgot it; `request`: an operator ran `subscriber-mirror erase` (both erase
 * every copy, for good); `out_of_groups`: out of every configured group past the period (what was
 * recorded up to then).
 */
export const ERASURE_REASONS = ['forget', 'out_of_groups', 'request'] as const;
export type ErasureReason = (typeof ERASURE_REASONS)[number];

export const erasures = pgTable(
  'erasures',
  {
    account: accountColumn(),
    subscriberId: text('subscriber_id').notNull(),
    reason: text('reason').$type<ErasureReason>().notNull(),
    erasedAt: tstz('erased_at').notNull().defaultNow(),
    /** Null until every stored delivery carrying the subscriber has been redacted. */
    deliveriesRedactedAt: tstz('deliveries_redacted_at'),
  },
  // Every subscriber write reads the few erased on request (src/mirror/erasure.ts, erasedOnRequestSql)
  // without scanning the out-of-groups erasures, which grow with the mirror.
  (t) => [
    primaryKey({ columns: [t.account, t.subscriberId] }),
    index('erasures_request_idx')
      .on(t.account, t.subscriberId)
      .where(sql`reason = 'request'`),
  ],
);

/** The content columns as view columns: the same names and types, nullable, without defaults. */
function subscriberContentViewColumns() {
  const out: Record<string, ReturnType<typeof text | typeof integer | typeof doublePrecision | typeof tstz | typeof jsonb>> = {};
  for (const key of SUBSCRIBER_CONTENT_KEYS) {
    const column = subscribers[key];
    const make = VIEW_COLUMN_BUILDERS[column.columnType];
    if (!make) throw new Error(`subscriber_versions: no view column for ${column.name} (${column.columnType})`);
    out[key] = make(column.name);
  }
  return out as unknown as Pick<typeof subscriberColumns, SubscriberContentKey>;
}

const VIEW_COLUMN_BUILDERS: Record<
  string,
  (name: string) => ReturnType<typeof text | typeof integer | typeof doublePrecision | typeof tstz | typeof jsonb>
> = {
  PgText: (name) => text(name),
  PgInteger: (name) => integer(name),
  PgDoublePrecision: (name) => doublePrecision(name),
  PgTimestampString: (name) => tstz(name),
  PgJsonb: (name) => jsonb(name),
};

/** Column lists wrapped seven to a line, as the migration that created the view wrote them. */
function wrapColumns(columns: readonly string[], indent: string): string {
  const lines: string[] = [];
  for (let i = 0; i < columns.length; i += 7) lines.push(columns.slice(i, i + 7).join(', '));
  return lines.join(`,\n${indent}`);
}

/** The view's definition from the content columns (drizzle-kit compares it to the last migration's). */
function subscriberVersionsSql(): string {
  const [first, ...rest] = wrapColumns(SUBSCRIBER_CONTENT_COLUMNS, '').split('\n');
  const outer = `via, recorded_at, ${first}${rest.length > 0 ? `\n       ${rest.join('\n       ')}` : ''}`;
  const inner = (head: string) => `${head}, ${wrapColumns(SUBSCRIBER_CONTENT_COLUMNS, '         ')}`;
  return `
select account, subscriber_id, valid_from,
       lead(valid_from) over (partition by account, subscriber_id order by valid_from) as valid_to,
       ${outer}
from (
  select ${inner('account, subscriber_id, valid_from, via, recorded_at')}
    from subscriber_versions_past
  union all
  select ${inner('account, id, version_at, mirrored_via, mirrored_at')}
    from subscribers
) v`;
}

/**
 * Every version of every subscriber (docs/sql.md, "History"): the past versions and the current `subscribers`
 * rows, with `valid_to`, the next version's `valid_from` (null for the current version). A filter on
 * `account` and `subscriber_id` is pushed below the window into both tables' primary keys, so one subscriber's
 * timeline reads its own rows only. Its columns and definition derive from the content columns.
 */
export const subscriberVersions = pgView('subscriber_versions', {
  account: text('account'),
  subscriberId: text('subscriber_id'),
  validFrom: tstz('valid_from'),
  validTo: tstz('valid_to'),
  via: text('via').$type<MirrorSource>(),
  recordedAt: tstz('recorded_at'),
  ...subscriberContentViewColumns(),
})
  .with({ securityInvoker: true })
  .as(sql.raw(subscriberVersionsSql()));
