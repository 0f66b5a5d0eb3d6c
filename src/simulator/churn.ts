/**
 * Random mutations, applied continuously at a rate (demos, soak tests) or on demand (`step`).
 * The mix leans on field updates and status changes, the things a mirror most often has to follow.
 */
import { mulberry32, pickWeighted } from './prng.js';
import type { Rng } from './prng.js';
import { FIELD_KEYS } from './kinds.js';
import type { World } from './world.js';
import type { SubscriberType } from './kinds.js';

export type MutationName =
  | 'create'
  | 'updateFields'
  | 'unsubscribe'
  | 'bounce'
  | 'markJunk'
  | 'markUnconfirmed'
  | 'activate'
  | 'addToGroup'
  | 'removeFromGroup'
  | 'delete'
  | 'forget'
  | 'triggerAutomation'
  | 'completeAutomation'
  | 'sendCampaign'
  | 'open'
  | 'click';

interface MutationSpec {
  readonly name: MutationName;
  readonly weight: number;
  /** Applies the mutation to a random live subscriber `id`. */
  readonly apply: (world: World, id: string, rng: Rng) => void;
}

const MUTATIONS: readonly MutationSpec[] = [
  { name: 'create', weight: 10, apply: (w, _id, rng) => void w.createSubscriber({ groups: [w.randomGroupId(rng) ?? ''].filter(Boolean) }) },
  { name: 'updateFields', weight: 28, apply: (w, id, rng) => void w.updateFields(id, randomFieldPatch(rng)) },
  { name: 'unsubscribe', weight: 8, apply: (w, id) => void w.unsubscribe(id) },
  { name: 'bounce', weight: 3, apply: (w, id) => void w.bounce(id) },
  { name: 'markJunk', weight: 2, apply: (w, id) => void w.markJunk(id) },
  { name: 'markUnconfirmed', weight: 2, apply: (w, id) => void w.markUnconfirmed(id) },
  { name: 'activate', weight: 8, apply: (w, id) => void w.activate(id) },
  { name: 'addToGroup', weight: 8, apply: (w, id, rng) => void w.addToGroup(id, w.randomGroupId(rng) ?? '') },
  { name: 'removeFromGroup', weight: 5, apply: (w, id, rng) => void w.removeFromGroup(id, w.randomGroupId(rng) ?? '') },
  { name: 'delete', weight: 2, apply: (w, id) => void w.deleteSubscriber(id) },
  { name: 'forget', weight: 1, apply: (w, id) => void w.forget(id) },
  { name: 'triggerAutomation', weight: 6, apply: (w, id, rng) => void w.triggerAutomation(id, randomAutomation(w, rng)) },
  { name: 'completeAutomation', weight: 4, apply: (w, id, rng) => void w.completeAutomation(id, randomAutomation(w, rng)) },
  { name: 'sendCampaign', weight: 0.5, apply: (w, _id, rng) => void w.sendCampaign({ groupIds: [w.randomGroupId(rng) ?? ''] }) },
  { name: 'open', weight: 5, apply: (w, id) => void w.open(id) },
  { name: 'click', weight: 4, apply: (w, id, rng) => void w.click(id, { url: `https://example.com/p/${Math.floor(rng() * 20)}` }) },
];
const WEIGHTS = MUTATIONS.map((m) => m.weight);

function randomFieldPatch(rng: Rng): Record<string, string> {
  const key = FIELD_KEYS[Math.floor(rng() * FIELD_KEYS.length)] ?? 'name';
  return { [key]: `${key}-${Math.floor(rng() * 1_000_000)}` };
}

function randomAutomation(world: World, rng: Rng): string | undefined {
  const list = world.automations();
  return list[Math.floor(rng() * list.length)]?.id;
}

/** Tries at picking a subscriber the churn does not spare before it picks none (then it creates one). */
const SPARE_TRIES = 8;

function pickUnspared(world: World, rng: Rng, spared: ReadonlySet<string>): string | undefined {
  for (let i = 0; i < SPARE_TRIES; i++) {
    const id = world.randomLiveId(rng);
    if (id === undefined || !spared.has(id)) return id;
  }
  return undefined;
}

/**
 * Applies one random mutation and returns its name. `spared` subscribers are never picked (a test
 * that set a blind spot on them keeps it until the mirror finds it); a campaign still reaches them.
 */
export function randomMutation(world: World, rng: Rng, spared: ReadonlySet<string> = new Set()): MutationName {
  const spec = MUTATIONS[pickWeighted(rng, WEIGHTS)] ?? MUTATIONS[0];
  const id = pickUnspared(world, rng, spared);
  if (!spec || (id === undefined && spec.name !== 'create')) {
    world.createSubscriber({ groups: world.groupIds().slice(0, 1) });
    return 'create';
  }
  try {
    spec.apply(world, id ?? '', rng);
  } catch (error) {
    // Only a world without groups, automations or campaigns ends up here: skip that mutation.
    if (!(error instanceof RangeError)) throw error;
  }
  return spec.name;
}

const TICK_MS = 50;

export class Churn {
  private readonly rng: Rng;
  private timer: NodeJS.Timeout | undefined;
  private perSecond = 0;
  private due = 0;
  private lastTick = 0;
  private count = 0;
  private readonly spared = new Set<string>();

  constructor(
    private readonly world: World,
    seed: number,
  ) {
    this.rng = mulberry32(seed ^ 0xc4a2);
  }

  /** Mutations applied so far (by the timer and by step). */
  get applied(): number {
    return this.count;
  }

  get rate(): number {
    return this.perSecond;
  }

  /** Mutations per second of wall time; 0 stops. */
  setRate(perSecond: number): void {
    if (!(perSecond >= 0)) throw new RangeError(`churn must be >= 0 mutations per second, got ${perSecond}`);
    this.perSecond = perSecond;
    if (perSecond === 0) {
      this.stop();
      return;
    }
    if (this.timer) return;
    this.lastTick = performance.now();
    this.timer = setInterval(() => this.tick(), TICK_MS);
    this.timer.unref();
  }

  /** From now on these subscribers are never picked (campaigns still reach them). */
  spare(ids: Iterable<string>): void {
    for (const id of ids) this.spared.add(id);
  }

  /** Applies `n` random mutations now; returns their names. */
  step(n = 1): MutationName[] {
    const names: MutationName[] = [];
    for (let i = 0; i < n; i++) names.push(randomMutation(this.world, this.rng, this.spared));
    this.count += n;
    return names;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.due = 0;
  }

  private tick(): void {
    const now = performance.now();
    this.due += ((now - this.lastTick) / 1000) * this.perSecond;
    this.lastTick = now;
    const n = Math.floor(this.due);
    this.due -= n;
    if (n > 0) this.step(n);
  }
}

/**
 * Page churn: mutations applied right after a legacy list page is served, i.e. between the pages of
 * a pass that reads with offset paging (docs/upstream.md, "Legacy lists": each member leaving ahead of the read
 * position hides one row at the next page boundary). Each page served of an unfiltered list of the
 * chosen group triggers `leave` removals (from rows the pass already read, the case that shifts
 * the rest up), `join` new members and `retype` type changes of members still ahead.
 */
export interface PageChurnSettings {
  /** Only pages of this group's lists trigger churn (default: every group). */
  groupId?: string;
  /** Members leaving per page (half removed from the group, half deleted), picked among rows before the page. */
  leave?: number;
  /** Members joining per page (new subscribers or existing ones added). */
  join?: number;
  /** Members changing type per page (active ↔ unsubscribed/bounced), picked among rows after the page. */
  retype?: number;
  /** Stop after this many pages have triggered churn (default: never). A small list that gains members on every page would otherwise never end. */
  pages?: number;
  /**
   * Bursts of departures: every `every`-th page served, `leave` more members the pass already read
   * leave at once (the unsubscribes right after a campaign), on top of `leave` per page.
   */
  burst?: { every: number; leave: number };
  /**
   * Members that flee every list being read (the worst a member changing type can do to per-type
   * passes): after each page of an unfiltered list of one type, each of these that is of that type
   * and still ahead of the read position changes type, from active to unsubscribed stamped only in
   * `date_unsubscribe`, from any other type to active. Every per-type pass then misses them.
   */
  flee?: readonly string[];
}

/** A list page as the server served it (legacy, or current-API members): what page churn reacts to. */
export interface ServedPage {
  groupId: string;
  type: SubscriberType | null;
  offset: number;
  rows: number;
  filtered: boolean;
  /** The order the list was read in: legacy list order (default), or ascending id (current API cursor pages). */
  order?: 'list' | 'id';
}

interface Settings {
  leave: number;
  join: number;
  retype: number;
  pages: number;
  burst: { every: number; leave: number } | null;
  flee: readonly string[];
  groupId?: string;
}

export class PageChurn {
  private readonly rng: Rng;
  private settings: Settings = { leave: 0, join: 0, retype: 0, pages: Infinity, burst: null, flee: [] };
  private served = 0;
  /** Mutations applied so far, by kind. */
  readonly applied = { leave: 0, join: 0, retype: 0, fled: 0 };
  /** Ids of the members that left through page churn, in order (tests check each was ended). */
  readonly left: string[] = [];

  constructor(
    private readonly world: World,
    seed: number,
  ) {
    this.rng = mulberry32(seed ^ 0x9a6e);
  }

  set(settings: PageChurnSettings): void {
    for (const key of ['leave', 'join', 'retype'] as const) {
      const n = settings[key] ?? 0;
      if (!(Number.isInteger(n) && n >= 0)) throw new RangeError(`page churn ${key} must be a whole number >= 0, got ${n}`);
    }
    const pages = settings.pages ?? Infinity;
    if (!(pages >= 0)) throw new RangeError(`page churn pages must be >= 0, got ${pages}`);
    const burst = settings.burst ?? null;
    if (burst && !(Number.isInteger(burst.every) && burst.every >= 1 && Number.isInteger(burst.leave) && burst.leave >= 0)) {
      throw new RangeError(`page churn burst needs whole numbers every >= 1 and leave >= 0, got ${JSON.stringify(burst)}`);
    }
    this.settings = {
      leave: settings.leave ?? 0,
      join: settings.join ?? 0,
      retype: settings.retype ?? 0,
      pages,
      burst,
      flee: [...(settings.flee ?? [])],
      ...(settings.groupId ? { groupId: settings.groupId } : {}),
    };
    this.served = 0;
  }

  clear(): void {
    this.settings = { leave: 0, join: 0, retype: 0, pages: Infinity, burst: null, flee: [] };
  }

  get active(): boolean {
    const { leave, join, retype, burst, pages, flee } = this.settings;
    return pages > 0 && leave + join + retype + (burst?.leave ?? 0) + flee.length > 0;
  }

  /** Members leaving after this page: the steady pace, plus a burst on every `burst.every`-th page. */
  private leavingNow(): number {
    const { leave, burst } = this.settings;
    this.served += 1;
    return leave + (burst && this.served % burst.every === 0 ? burst.leave : 0);
  }

  /** Called by the server after each list page. Filtered (incremental) reads are left alone. */
  onPage(served: ServedPage): void {
    if (!this.active || served.filtered || served.rows === 0) return;
    if (this.settings.groupId !== undefined && served.groupId !== this.settings.groupId) return;
    this.settings.pages -= 1;
    const list =
      served.order === 'id' && served.type !== null
        ? this.world.membersById(served.groupId, served.type)
        : this.world.members(served.groupId, served.type ?? undefined);
    const readSoFar = list.slice(0, served.offset + served.rows);
    const ahead = list.slice(served.offset + served.rows);
    this.flee(new Set(ahead), served);
    const leaving = this.leavingNow();
    for (let i = 0; i < leaving && readSoFar.length > 0; i++) {
      const id = readSoFar.splice(Math.floor(this.rng() * readSoFar.length), 1)[0] as string;
      if (this.rng() < 0.5) this.world.removeFromGroup(id, served.groupId);
      else this.world.deleteSubscriber(id);
      this.applied.leave += 1;
      this.left.push(id);
    }
    for (let i = 0; i < this.settings.join; i++) {
      this.world.createSubscriber({ groups: [served.groupId], status: served.type ?? 'active' });
      this.applied.join += 1;
    }
    for (let i = 0; i < this.settings.retype && ahead.length > 0; i++) {
      const id = ahead.splice(Math.floor(this.rng() * ahead.length), 1)[0] as string;
      const status = this.world.subscriber(id)?.status;
      if (status === 'active') {
        if (this.rng() < 0.7) this.world.unsubscribe(id);
        else this.world.bounce(id);
      } else this.world.activate(id);
      this.applied.retype += 1;
    }
  }

  /** Fleeing members of the type just read that are still ahead of the read position change type. */
  private flee(ahead: ReadonlySet<string>, served: ServedPage): void {
    if (served.type === null) return;
    for (const id of this.settings.flee) {
      if (!ahead.has(id) || this.world.membership(served.groupId, id)?.type !== served.type) continue;
      if (served.type === 'active') this.world.unsubscribeUnstamped(id);
      else this.world.activate(id);
      this.applied.fled += 1;
    }
  }
}
