/**
 * Identifiers and derived personal data. Ids are computed from the slot (base + slot·stride +
 * jitter) so that looking one up needs no Map of a million strings, and ids still look irregular.
 * Above 2^53 (largeIds) every step uses bigint: a JS number would silently round them.
 */
import { hash32 } from './prng.js';
import type { SubscriberFields } from './kinds.js';

const STRIDE = 1000n;

export interface IdScheme {
  idOf(slot: number): string;
  /** The slot of an id, or undefined for anything this scheme never issued. */
  slotOf(id: string, count: number): number | undefined;
}

/** Subscriber id bases: small ids stay far below 2^53; large ones sit just above 1.26e18 as in the real example. */
const SMALL_SUBSCRIBER_BASE = 10_000_000n;
const LARGE_SUBSCRIBER_BASE = 1_261_159_647_000_000_000n;

export function subscriberIdScheme(largeIds: boolean, salt: number): IdScheme {
  const base = largeIds ? LARGE_SUBSCRIBER_BASE : SMALL_SUBSCRIBER_BASE;
  const jitter = (slot: number): bigint => BigInt(hash32(salt, slot) % 1000);
  return {
    idOf(slot: number): string {
      return (base + BigInt(slot) * STRIDE + jitter(slot)).toString();
    },
    slotOf(id: string, count: number): number | undefined {
      if (!/^\d{1,30}$/.test(id)) return undefined;
      const offset = BigInt(id) - base;
      if (offset < 0n) return undefined;
      const slot = Number(offset / STRIDE);
      if (slot >= count || offset % STRIDE !== jitter(slot)) return undefined;
      return slot;
    },
  };
}

/** Sequential ids for groups, automations, campaigns and webhooks, each family in its own range. */
export function sequenceId(largeIds: boolean, family: number, n: number): string {
  const base = largeIds ? 91_872_364_519_000_000n + BigInt(family) * 10_000_000_000n : BigInt(family) * 1_000_000n;
  return (base + BigInt(n) * 17n + 1n).toString();
}

export const ID_FAMILY = { group: 1, automation: 2, campaign: 3, webhook: 4 } as const;

const FIRST_NAMES = [
  'Ada',
  'Alan',
  'Grace',
  'Linus',
  'Margaret',
  'Dennis',
  'Barbara',
  'Ken',
  'Frances',
  'Edsger',
  'Radia',
  'Donald',
  'Hedy',
  'Tim',
  'Katherine',
  'Guido',
  'Joan',
  'Bjarne',
  'Sophie',
  'John',
  'Mary',
  'Niklaus',
  'Karen',
  'James',
  'Annie',
  'Leslie',
  'Shafi',
  'Vint',
  'Lynn',
  'Brian',
  'Jean',
  'Yukihiro',
  'Anita',
  'Ward',
  'Elena',
  'Ole',
  'Zoë',
  'Müller',
  'Łukasz',
  'Ana María',
];
const LAST_NAMES = [
  'Lovelace',
  'Turing',
  'Hopper',
  'Torvalds',
  'Hamilton',
  'Ritchie',
  'Liskov',
  'Thompson',
  'Allen',
  'Dijkstra',
  'Perlman',
  'Knuth',
  'Lamarr',
  'Berners-Lee',
  'Johnson',
  'van Rossum',
  'Clarke',
  'Stroustrup',
  'Wilson',
  'McCarthy',
  'Keller',
  'Wirth',
  'Jones',
  'Gosling',
  'Easley',
  'Lamport',
  'Goldwasser',
  'Cerf',
  'Conway',
  'Kernighan',
  "O'Brien",
  'Matsumoto',
  'Borg',
  'Cunningham',
  'Núñez',
  'Dahl',
  'Smith',
  'García',
  'Nowak',
  'Østergaard',
];
const COMPANIES = ['Acme', 'Globex', 'Initech', 'Umbrella', 'Hooli', 'Stark Industries', 'Wayne Enterprises', 'Vandelay'];
const PLACES = [
  { country: 'Lithuania', city: 'Vilnius', state: '', zip: '01100', phone: '+370' },
  { country: 'Germany', city: 'Berlin', state: 'Berlin', zip: '10115', phone: '+49' },
  { country: 'United States', city: 'Austin', state: 'TX', zip: '73301', phone: '+1' },
  { country: 'Japan', city: 'Tokyo', state: 'Tokyo', zip: '100-0001', phone: '+81' },
  { country: 'Brazil', city: 'São Paulo', state: 'SP', zip: '01000-000', phone: '+55' },
  { country: 'New Zealand', city: 'Auckland', state: '', zip: '1010', phone: '+64' },
  { country: 'Kiribati', city: 'Tarawa', state: '', zip: '', phone: '+686' },
];

function at<T>(items: readonly T[], index: number): T {
  const item = items[index % items.length];
  if (item === undefined) throw new Error('empty word list');
  return item;
}

export interface DerivedPerson {
  readonly email: string;
  readonly fields: SubscriberFields;
}

/** Deterministic personal data for a seeded slot; about a third of the optional fields stay empty. */
export function derivePerson(salt: number, slot: number): DerivedPerson {
  const h1 = hash32(salt, slot);
  const h2 = hash32(salt ^ 0x5bd1e995, slot);
  const first = at(FIRST_NAMES, h1 & 0xffff);
  const last = at(LAST_NAMES, h1 >>> 16);
  const place = at(PLACES, h2 & 0xff);
  const detailed = (h2 >>> 8) % 3 !== 0;
  const local = `${first}.${last}`
    .normalize('NFKD')
    .replace(/[^A-Za-z.]/g, '')
    .toLowerCase();
  return {
    email: `${local}.${slot}@example.com`,
    fields: {
      name: first,
      last_name: last,
      company: detailed ? at(COMPANIES, h2 >>> 12) : '',
      country: detailed ? place.country : '',
      city: detailed ? place.city : '',
      phone: detailed ? `${place.phone} ${String(h1 % 10_000_000).padStart(7, '0')}` : '',
      state: detailed ? place.state : '',
      zip: detailed ? place.zip : '',
    },
  };
}

export const EMPTY_FIELDS: SubscriberFields = Object.freeze({
  name: '',
  last_name: '',
  company: '',
  country: '',
  city: '',
  phone: '',
  state: '',
  zip: '',
});

export function ipToString(ip: number): string | null {
  if (ip === 0) return null;
  return `${ip >>> 24}.${(ip >>> 16) & 255}.${(ip >>> 8) & 255}.${ip & 255}`;
}

export function ipFromString(text: string | null | undefined): number {
  if (!text) return 0;
  const parts = text.split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) {
    throw new RangeError(`not an IPv4 address: ${text}`);
  }
  return parts.reduce((acc, p) => acc * 256 + p, 0) >>> 0;
}
