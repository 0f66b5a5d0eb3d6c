/**
 * Personal data in the shapes the service sends, derived from the personal columns of the registry
 * (`src/db/schema.ts`) through the upstream key mapping (`schemas.ts`): what redacting a stored
 * delivery body removes from a subscriber object. Nothing here lists a field by hand but the two
 * facts below about the bodies themselves.
 */
import { PERSONAL_FIELDS, SUBSCRIBER_DATA_COLUMNS, SUBSCRIBER_FIELDS } from '../db/subscriber-columns.js';
import { SUBSCRIBER_ACTIVITY_PERSONAL, subscriberActivity } from '../db/schema.js';
import { upstreamKeysOf, webhookKeysOf } from './schemas.js';

const NON_PERSONAL_FIELDS = SUBSCRIBER_FIELDS.filter((f) => !PERSONAL_FIELDS.includes(f));

/** Subscriber keys (webhook and legacy naming) that are not personal data: a redaction keeps them. */
export const SUBSCRIBER_KEPT_KEYS: ReadonlySet<string> = new Set(['id', ...upstreamKeysOf(NON_PERSONAL_FIELDS)]);

/** Groups and campaigns have names too: `name` does not mark an object as a subscriber. */
const SHARED_WITH_OTHER_OBJECTS = new Set(['name']);

/** Keys whose presence marks an object of a delivery body as a subscriber (with a matching id). */
export const SUBSCRIBER_MARKER_KEYS: readonly string[] = webhookKeysOf(PERSONAL_FIELDS)
  .map(([key]) => key)
  .filter((key) => !SHARED_WITH_OTHER_OBJECTS.has(key));

/** The service's own form of an erased email (a forget upstream sends it): the parser expects a string. */
const EMPTIED_OVERRIDES: Readonly<Record<string, unknown>> = { email: '' };

/**
 * The personal keys of a subscriber object and the value a redaction leaves in each (emptied
 * rather than removed, so the body keeps the shape the parser expects); other keys not in
 * {@link SUBSCRIBER_KEPT_KEYS} are removed (they would be `extra`, personal whole).
 */
export const SUBSCRIBER_EMPTIED: Readonly<Record<string, unknown>> = Object.fromEntries(
  webhookKeysOf(PERSONAL_FIELDS).map(([key, field]) => {
    const type = SUBSCRIBER_DATA_COLUMNS.find((c) => c.field === field)?.type;
    return [key, key in EMPTIED_OVERRIDES ? EMPTIED_OVERRIDES[key] : type === 'jsonb' ? {} : null];
  }),
);

/**
 * A link without what can carry a subscriber's data: the query string, the fragment, any user info,
 * and every path segment (or a link without slashes, such as `mailto:`) holding an `@` plain or
 * URL-encoded (`%40`), which an email in the path would (`https://x.example/u/jane@example.com/offer?email=…` → `https://x.example/u/-/offer`);
 * scheme, host and the rest of the path stay. The same rule as {@link linkWithoutPersonalDataSql},
 * for the links inside stored delivery bodies.
 */
export function linkWithoutPersonalData(url: string): string {
  return url
    .replace(/[?#][\s\S]*$/, '')
    .replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/@]*@/i, '$1')
    .replace(/(^|\/)[^/]*(?:@|%40)[^/]*/gi, '$1-');
}

/** {@link linkWithoutPersonalData} as a SQL expression over `expr` (a text column). */
export function linkWithoutPersonalDataSql(expr: string): string {
  const cut = `regexp_replace(regexp_replace(${expr}, '[?#].*$', ''), '^([a-z][a-z0-9+.-]*://)[^/@]*@', '\\1', 'i')`;
  return `regexp_replace(${cut}, '(^|/)[^/]*(@|%40)[^/]*', '\\1-', 'gi')`;
}

/** The columns of `subscriber_activity` holding links an erasure cuts (the registry's `link-query` role). */
export const ACTIVITY_LINK_COLUMNS: readonly string[] = (
  Object.keys(SUBSCRIBER_ACTIVITY_PERSONAL) as Array<keyof typeof SUBSCRIBER_ACTIVITY_PERSONAL>
)
  .filter((k) => SUBSCRIBER_ACTIVITY_PERSONAL[k] === 'link-query')
  .map((k) => subscriberActivity[k].name);
