/**
 * The audit against every blind spot at once, under ordinary stamped churn, on both read sources
 * (docs/operations.md, "The audit"; docs/faults.md). `start --role all` runs with RECONCILE_EVERY=24h
 * (no full pass would come for a day) and AUDIT_EVERY=5s against the simulator at timeScale 0.02
 * (deliveries batched every 1.2 s, so AUDIT_SETTLE=4s). Its webhooks reach the receiver through a
 * proxy the scenario cuts.
 *
 * First the churn alone: the audit reports nothing (precision). Then, at one instant: 5 members
 * renamed without a new stamp, a member joining with a 3-day-old stamp, 3 members removed without a
 * stamp, and the webhooks' deliveries failing until the service disables them. Each must be
 * detected within 2 × AUDIT_EVERY and repaired within one more pass; every mismatch the audit
 * reports after that instant must be one of them, or a change lost while the webhooks were off.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_ACCOUNT } from '../../src/config.js';
import { SUBSCRIBER_TYPES, startSimulator, type Simulator, type SubscriberType } from '../../src/simulator/index.js';
import { BATCHED_KINDS, REALTIME_KINDS } from '../../src/webhooks/manage.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { startTcpProxy, type TcpProxy } from '../helpers/proxy.js';
import { deleteInstallKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { useSecondAccount } from './helpers/second-account.js';
import { makeSecrets, withCredentials } from './helpers/secrets.js';
import {
  assertRunning,
  freePort,
  killAll,
  linesOf,
  printSummary,
  servicePort,
  sleep,
  startService,
  stopGracefully,
  type LogLine,
  type ServiceProcess,
} from './helpers/service.js';

type Source = 'legacy' | 'current';
const TYPES = SUBSCRIBER_TYPES as readonly SubscriberType[];
const AUDIT_EVERY_MS = 5_000;
const DAY_MS = 86_400_000;
/** The ticks' own time (reads, writes, the webhook read-back) on this 2-core machine: the next tick starts AUDIT_EVERY after one ends. */
const TICK_SLACK_MS = 2_000;
/** Churn alone before the blind spots: every tick of it must report nothing. */
const PRECISION_MS = 20_000;
/** The longest the scenario waits for every repair after the blind spots. */
const REPAIR_TIMEOUT_MS = 45_000;

const BLIND_SPOTS = ['unstamped renames', 'old-stamp joiner', 'silent removals', 'webhook disabled'] as const;
type BlindSpot = (typeof BLIND_SPOTS)[number];

const FINDING_MESSAGES = ['audit: the mirror differed from the service; repaired', 'audit: mismatches persist after a repair'];

/** What the audit logs when it finds something (warn level). */
interface AuditFinding {
  at: number;
  type: string;
  contentIds: string[];
  missingIds: string[];
  extraIds: string[];
  countGap: number | null;
}

function findings(lines: readonly LogLine[]): AuditFinding[] {
  return lines
    .filter((l) => typeof l.msg === 'string' && FINDING_MESSAGES.includes(l.msg) && typeof l.time === 'string')
    .map((l) => ({
      at: Date.parse(l.time as string),
      type: String(l.type),
      contentIds: (l.contentIds as string[] | undefined) ?? [],
      missingIds: (l.missingIds as string[] | undefined) ?? [],
      extraIds: (l.extraIds as string[] | undefined) ?? [],
      countGap: typeof l.countGap === 'number' ? l.countGap : null,
    }));
}

/** Old members (stamped more than 3 days ago: outside every incremental window) of a type, in list order. */
function oldMembers(sim: Simulator, groupId: string, type: SubscriberType, exclude?: string): string[] {
  const cutoff = Date.now() - 3 * DAY_MS;
  const inExcluded = new Set(exclude ? sim.world.members(exclude) : []);
  return sim.world.members(groupId, type).filter((id) => {
    const s = sim.world.subscriber(id);
    return s !== undefined && s.updatedAtUs / 1000 < cutoff && (s.unsubscribedAtUs ?? 0) / 1000 < cutoff && !inExcluded.has(id);
  });
}

interface Figures {
  detectedMs: Record<BlindSpot, number | null>;
  repairedMs: Record<BlindSpot, number | null>;
  precisionRowsChecked: number;
  precisionMismatches: number;
  rowsChecked: number;
  mismatches: number;
  unexplained: string[];
  missedDeliveries: number;
}

describe('fault: the audit against every blind spot at once under stamped churn', () => {
  const live: Array<{ sim: Simulator; database: TestDatabase; proxy: TcpProxy; prefix: string }> = [];
  // Audited every AUDIT_EVERY too, by the same process; the scenario's worlds have small ids.
  const second = useSecondAccount('audit-blind-spots', { largeIds: true });

  afterAll(async () => {
    killAll();
    for (const { sim, database, proxy, prefix } of live) {
      await sim.close();
      await proxy.close();
      await database.drop();
      await deleteInstallKeys(prefix);
    }
  });

  async function scenario(source: Source): Promise<Figures> {
    const started = Date.now();
    const secrets = makeSecrets(`audit-blind-spots-${source}`);
    const database = await createTestDatabase();
    const sim = await startSimulator({
      subscribers: 300,
      groups: 2,
      seed: 27,
      rateLimit: false,
      timeScale: 0.02,
      webhookDisableAfterMs: 2_000,
      apiKey: secrets.apiKey,
      webhooksToken: secrets.webhooksToken,
    });
    const receiverPort = await freePort();
    const proxy = await startTcpProxy({ host: '127.0.0.1', port: receiverPort });
    const prefix = uniquePrefix(`fault-audit-${source}`);
    live.push({ sim, database, proxy, prefix });
    const [groupId, otherGroup] = sim.world.groupIds() as [string, string];

    // The webhooks as `webhooks register` leaves them: at the service, and their secrets in webhook_endpoints.
    const url = `http://127.0.0.1:${proxy.port}/webhooks`;
    const hooks = [
      sim.webhooks.register({ url, events: [...REALTIME_KINDS], batchable: false }),
      sim.webhooks.register({ url, events: [...BATCHED_KINDS], batchable: true }),
    ];
    for (const w of hooks) {
      await database.pool.query(`insert into webhook_endpoints (id, url, events, batchable, secret) values ($1, $2, $3, $4, $5)`, [
        w.id,
        w.url,
        w.events,
        w.batchable,
        w.secret,
      ]);
    }
    const read: Record<string, string> =
      source === 'legacy'
        ? { SYNC_SOURCE: 'legacy', MAILER_LEGACY_URL: sim.url, MAILER_API_KEY: secrets.apiKey, SYNC_EVERY: '2s' }
        : { SYNC_SOURCE: 'current' };
    const env: Record<string, string> = {
      DATABASE_URL: withCredentials(database.url, 'postgres', secrets.dbPassword),
      REDIS_URL: withCredentials(redisUrl(), 'default', secrets.redisPassword),
      REDIS_PREFIX: prefix,
      ...read,
      // Webhook management (and, on the current source, its reads): one host, one token.
      MAILER_API_URL: sim.url,
      MAILER_API_TOKEN: secrets.webhooksToken,
      SYNC_GROUPS: groupId,
      SYNC_TYPES: TYPES.join(','),
      SYNC_PAGE_SIZE: '100',
      RECONCILE_EVERY: '24h',
      AUDIT_EVERY: `${AUDIT_EVERY_MS / 1000}s`,
      AUDIT_SETTLE: '4s',
      WEBHOOKS_REENABLE: 'true',
      // The audit spends 5 % of it: a whole tick (11 requests) fits in every 5 s tick.
      API_RATE_LIMIT: '100000',
      ADMIN_TOKEN: secrets.adminToken,
      PORT: String(receiverPort),
      OPS_PORT: '0',
      LOG_LEVEL: process.env.AUDIT_FAULT_LOG_LEVEL ?? 'info',
    };

    const service: ServiceProcess = startService('all', env, `audit-blind-spots-${source}`);
    // What the audit of the scenario's account logged: the second account's audit logs the same messages.
    const own = () => linesOf(service, DEFAULT_ACCOUNT);
    await servicePort(service);
    const completeFullPasses = async () =>
      Number(
        (
          await database.pool.query<{ n: string }>(
            'select count(*) as n from sync_status where group_id = $1 and last_full_completed_at is not null',
            [groupId],
          )
        ).rows[0]?.n,
      );
    for (const deadline = Date.now() + 60_000; (await completeFullPasses()) < TYPES.length;) {
      assertRunning(service, 'while waiting for the first full passes');
      if (Date.now() > deadline) throw new Error('the first full passes did not complete within 60 s');
      await sleep(250);
    }

    // Who carries each blind spot: old stamps (no incremental window reaches them), not active (a
    // campaign would stamp them), spared by the churn (it would stamp them too).
    // The leavers come from the smallest list (junk): a count gap is masked while as many other
    // members of that list changed in the count's margin (docs/operations.md, "The audit").
    const renamed = oldMembers(sim, groupId, 'unconfirmed').slice(0, 5);
    const leavers = oldMembers(sim, groupId, 'junk').slice(0, 3);
    const joiner = oldMembers(sim, otherGroup, 'bounced', groupId)[0] as string;
    expect(renamed).toHaveLength(5);
    expect(leavers).toHaveLength(3);
    expect(joiner).toBeDefined();
    sim.churn.spare([...renamed, ...leavers, joiner]);

    // Stamped churn alone: 4 changes a second, every kind the simulator makes.
    sim.churn.setRate(4);
    const churnFrom = Date.now();
    await sleep(PRECISION_MS);
    assertRunning(service, 'during the churn');

    // Every blind spot at once.
    const t0 = Date.now();
    const disabledAt = new Map<string, number>();
    // From t0 until every webhook is enabled again, changes may not reach the mirror by webhook.
    const outage: { to: number | null } = { to: null };
    sim.deliveries.onDisabled((id) => disabledAt.set(id, Date.now()));
    const lostIds = new Set<string>();
    const stopLost = sim.world.onEvent((e) => {
      if (e.subscriberId && (outage.to === null || Date.now() <= outage.to)) lostIds.add(e.subscriberId);
    });
    for (const [i, id] of renamed.entries()) sim.world.updateFieldsSilently(id, { name: `Unstamped ${i}` });
    sim.world.restamp(joiner, Date.now() - 3 * DAY_MS);
    sim.world.addToGroupSilently(joiner, groupId);
    for (const id of leavers) sim.world.removeFromGroupSilently(id, groupId);
    await proxy.cut();

    const detected: Record<BlindSpot, number | null> = {
      'unstamped renames': null,
      'old-stamp joiner': null,
      'silent removals': null,
      'webhook disabled': null,
    };
    const repaired: Record<BlindSpot, number | null> = { ...detected };
    let restored = false;
    const deadline = Date.now() + REPAIR_TIMEOUT_MS;
    while (BLIND_SPOTS.some((b) => repaired[b] === null)) {
      assertRunning(service, 'while waiting for the audit');
      if (Date.now() > deadline) break;
      // The deliveries fail until the service disabled a webhook (3 days scaled to 2 s); then the receiver is reachable again.
      if (!restored && disabledAt.size > 0) {
        await proxy.restore();
        restored = true;
      }
      const found = findings(own()).filter((f) => f.at >= t0);
      const has = (pick: (f: AuditFinding) => string[], ids: readonly string[]) =>
        ids.every((id) => found.some((f) => pick(f).includes(id)))
          ? Math.max(...ids.map((id) => Math.min(...found.filter((f) => pick(f).includes(id)).map((f) => f.at))))
          : null;
      detected['unstamped renames'] ??= has((f) => f.contentIds, renamed);
      detected['old-stamp joiner'] ??= has((f) => f.missingIds, [joiner]);
      const gap = found.find(
        (f) => f.type === 'junk' && ((f.countGap !== null && f.countGap < 0) || leavers.some((id) => f.extraIds.includes(id))),
      );
      detected['silent removals'] ??= gap?.at ?? null;
      const reenabled = own().find((l) => typeof l.msg === 'string' && l.msg.includes('re-enabled it') && typeof l.time === 'string');
      detected['webhook disabled'] ??= reenabled ? Date.parse(reenabled.time as string) : null;

      const now = Date.now();
      const { rows } = await database.pool.query<{ id: string; name: string | null; type: string | null; removed: boolean | null }>(
        `select s.id, s.name, m.type, m.removed_at is not null as removed
           from subscribers s left join group_members m on m.subscriber_id = s.id and m.group_id = $1
          where s.id = any($2::text[])`,
        [groupId, [...renamed, ...leavers, joiner]],
      );
      const byId = new Map(rows.map((r) => [r.id, r]));
      if (repaired['unstamped renames'] === null && renamed.every((id, i) => byId.get(id)?.name === `Unstamped ${i}`))
        repaired['unstamped renames'] = now;
      if (repaired['old-stamp joiner'] === null && byId.get(joiner)?.type === 'bounced' && byId.get(joiner)?.removed === false)
        repaired['old-stamp joiner'] = now;
      if (repaired['silent removals'] === null && leavers.every((id) => byId.get(id)?.removed === true)) repaired['silent removals'] = now;
      if (repaired['webhook disabled'] === null && disabledAt.size > 0 && hooks.every((h) => sim.webhooks.get(h.id)?.enabled === true)) {
        repaired['webhook disabled'] = now;
        outage.to = now;
      }
      await sleep(200);
    }
    stopLost();
    // One more settle after the last repair, with the churn still on: nothing new may show up.
    await sleep(2 * AUDIT_EVERY_MS);
    sim.churn.stop();
    assertRunning(service, 'at the end');

    const results = await database.pool.query<{
      before: boolean;
      rowsChecked: number;
      content: number;
      missing: number;
      extra: number;
      count: number;
      missedDeliveries: number;
    }>(
      `select at < $1::timestamptz as before, sum(rows_checked)::int as "rowsChecked", sum(content)::int as content,
              sum(missing)::int as missing, sum(extra)::int as extra, sum(count)::int as count,
              sum(missed_deliveries)::int as "missedDeliveries"
         from audit_results where account = mirror_account() and at >= $2::timestamptz group by 1`,
      [new Date(t0).toISOString(), new Date(churnFrom).toISOString()],
    );
    const before = results.rows.find((r) => r.before);
    const after = results.rows.find((r) => !r.before);
    const sum = (r: typeof before) => (r ? r.content + r.missing + r.extra + r.count : 0);

    // After t0, a mismatch names a blind spot's member, or one whose change was lost while the webhooks were off.
    const expected = new Set([...renamed, ...leavers, joiner, ...lostIds]);
    const unexplained: string[] = [];
    for (const f of findings(own()).filter((x) => x.at >= t0)) {
      for (const id of [...f.contentIds, ...f.missingIds, ...f.extraIds]) if (!expected.has(id)) unexplained.push(`${f.type} ${id}`);
    }
    // A count gap at t0 or later is the leavers' (junk) or a departure the webhooks lost (its type).
    const lostTypes = new Set([...lostIds].map((id) => sim.world.subscriber(id)?.status));
    for (const f of findings(own()).filter((x) => x.at >= t0 && x.countGap !== null)) {
      if (f.type !== 'junk' && !lostTypes.has(f.type as SubscriberType)) unexplained.push(`${f.type} count gap ${f.countGap}`);
    }
    const figures: Figures = {
      detectedMs: Object.fromEntries(
        BLIND_SPOTS.map((b) => [b, detected[b] === null ? null : detected[b] - startOf(b)]),
      ) as Figures['detectedMs'],
      repairedMs: Object.fromEntries(
        BLIND_SPOTS.map((b) => [b, repaired[b] === null ? null : repaired[b] - startOf(b)]),
      ) as Figures['repairedMs'],
      precisionRowsChecked: before?.rowsChecked ?? 0,
      precisionMismatches: sum(before),
      rowsChecked: (before?.rowsChecked ?? 0) + (after?.rowsChecked ?? 0),
      mismatches: sum(after),
      unexplained,
      missedDeliveries: (before?.missedDeliveries ?? 0) + (after?.missedDeliveries ?? 0),
    };
    function startOf(b: BlindSpot): number {
      // The webhook blind spot starts when the service disabled the first webhook; the others at t0.
      return b === 'webhook disabled' ? Math.min(...disabledAt.values()) : t0;
    }
    const secondFigures = await second.expectMirrored(database.url, [sim.world]);
    expect(await stopGracefully(service)).toBe(0);
    // What the audit found after t0, ids only (the record docs/faults.md quotes).
    for (const f of findings(own()).filter((x) => x.at >= churnFrom)) {
      const what = [
        f.contentIds.length ? `content ${f.contentIds.join(' ')}` : '',
        f.missingIds.length ? `missing ${f.missingIds.join(' ')}` : '',
        f.extraIds.length ? `extra ${f.extraIds.join(' ')}` : '',
        f.countGap !== null ? `count gap ${f.countGap}` : '',
      ].filter(Boolean);
      console.log(`[faults]   ${source} t0${f.at >= t0 ? '+' : '-'}${Math.abs(f.at - t0)} ms ${f.type}: ${what.join('; ')}`);
    }
    if (process.env.AUDIT_FAULT_LOG_LEVEL === 'debug')
      for (const l of own().filter((x) => x.msg === 'audit: pairs left for a later tick' && Date.parse(String(x.time)) >= t0))
        console.log(`[faults]   t0+${Date.parse(String(l.time)) - t0} skipped ${JSON.stringify(l.skipped)}`);
    if (figures.unexplained.length > 0) console.log(`[faults]   unexplained: ${figures.unexplained.join(', ')}`);
    printSummary(`audit blind spots (${source})`, {
      auditEvery: `${AUDIT_EVERY_MS / 1000}s`,
      churnApplied: sim.churn.applied,
      ...Object.fromEntries(
        BLIND_SPOTS.flatMap((b) => [
          [`${b} detected ms`, String(figures.detectedMs[b])],
          [`${b} repaired ms`, String(figures.repairedMs[b])],
        ]),
      ),
      webhooksDisabled: disabledAt.size,
      precisionRowsChecked: figures.precisionRowsChecked,
      precisionMismatches: figures.precisionMismatches,
      rowsChecked: figures.rowsChecked,
      mismatchesAfterBlindSpots: figures.mismatches,
      lostWhileWebhooksOff: lostIds.size,
      missedDeliveries: figures.missedDeliveries,
      unexplained: figures.unexplained.length,
      ...secondFigures,
      seconds: Math.round((Date.now() - started) / 1000),
    });
    return figures;
  }

  it.each<Source>(['legacy', 'current'])(
    '%s: each blind spot detected within 2 × AUDIT_EVERY and repaired within one more pass; nothing reported over stamped churn',
    async (source) => {
      const f = await scenario(source);
      expect(f.precisionRowsChecked).toBeGreaterThan(200);
      expect(f.precisionMismatches).toBe(0);
      expect(f.unexplained).toEqual([]);
      for (const b of BLIND_SPOTS) {
        expect(f.detectedMs[b], `${b} detected`).not.toBeNull();
        // Two ticks: a tick starts AUDIT_EVERY after the previous one ended, so two ticks' own time on top.
        expect(f.detectedMs[b] as number, `${b} detected within 2 × AUDIT_EVERY`).toBeLessThanOrEqual(2 * AUDIT_EVERY_MS + TICK_SLACK_MS);
        expect(f.repairedMs[b], `${b} repaired`).not.toBeNull();
        // Repaired within one more pass: the next tick, or the full pass the audit asked for.
        expect(f.repairedMs[b] as number, `${b} repaired within one more pass`).toBeLessThanOrEqual(3 * AUDIT_EVERY_MS + TICK_SLACK_MS);
      }
    },
    150_000,
  );
});
