/**
 * Every mutation of the simulator's world, so that every event kind (docs/upstream.md, "Event kinds")
 * is emitted: shared by the webhook end-to-end tests (with and without reads).
 */
import type { World } from '../../src/simulator/world.js';
import { sleep } from './wait.js';

export type Mutation = (world: World, id: string, rng: () => number) => unknown;

/** Every mutation of the world, so every kind (docs/upstream.md, "Event kinds") is emitted. */
export const MUTATIONS: Record<string, Mutation> = {
  updateFields: (w, id, rng) => w.updateFields(id, { city: `City ${Math.floor(rng() * 1000)}`, last_name: `L${Math.floor(rng() * 99)}` }),
  changeEmail: (w, id, rng) => w.updateFields(id, { email: `moved.${Math.floor(rng() * 1e6)}@example.com` }),
  unsubscribe: (w, id) => w.unsubscribe(id),
  bounce: (w, id) => w.bounce(id),
  markJunk: (w, id) => w.markJunk(id),
  markUnconfirmed: (w, id) => w.markUnconfirmed(id),
  activate: (w, id) => w.activate(id),
  addToGroup: (w, id, rng) => w.addToGroup(id, pick(w.groupIds(), rng)),
  removeFromGroup: (w, id, rng) => w.removeFromGroup(id, pick(w.groupIds(), rng)),
  triggerAutomation: (w, id, rng) => w.triggerAutomation(id, pick(w.automations(), rng).id),
  completeAutomation: (w, id, rng) => w.completeAutomation(id, pick(w.automations(), rng).id),
  open: (w, id) => w.open(id),
  click: (w, id, rng) => w.click(id, { url: `https://example.com/p/${Math.floor(rng() * 5)}` }),
  delete: (w, id) => w.deleteSubscriber(id),
  forget: (w, id) => w.forget(id),
};

function pick<T>(list: readonly T[], rng: () => number): T {
  return list[Math.floor(rng() * list.length)] as T;
}

export function createSubscribers(world: World, n: number, rng: () => number): string[] {
  const groups = world.groupIds();
  return Array.from({ length: n }, (_, i) =>
    world.createSubscriber({
      fields: { name: `Person ${i}` },
      groups: groups.filter(() => rng() < 0.5),
      status: i % 7 === 0 ? 'unconfirmed' : 'active',
    }),
  );
}

/** `rounds` random mutations (each kind once first), yielding now and then so deliveries interleave. */
export async function mutate(world: World, ids: readonly string[], rounds: number, rng: () => number): Promise<void> {
  const names = Object.keys(MUTATIONS);
  for (let i = 0; i < rounds; i++) {
    const name = i < names.length ? (names[i] as string) : pick(names, rng);
    // Deletions are rarer, so most subscribers stay alive for later mutations.
    if ((name === 'delete' || name === 'forget') && i >= names.length && rng() < 0.8) continue;
    const id = pick(ids, rng);
    try {
      (MUTATIONS[name] as Mutation)(world, id, rng);
    } catch (error) {
      if (!(error instanceof RangeError)) throw error; // a deleted subscriber: skip
    }
    if (i % 25 === 0) await sleep(5);
  }
}
