/**
 * The three wire shapes of one subscriber, rendered from the world's columns: the legacy API's
 * listing (docs/upstream.md, "Legacy lists"; dates in the world's zone), a webhook payload's
 * subscriber (ISO timestamps with microseconds), and the current API's listing (the webhook shape
 * with zoned dates, without `deleted_at` and `forget_at`).
 */
import { ipToString } from './identity.js';
import { FIELD_KEYS } from './kinds.js';
import type { LegacyField, LegacySubscriber, SubscriberFields, SubscriberType, WebhookSubscriber } from './kinds.js';
import { rate } from './render.js';
import type { SubscriberTable } from './table.js';
import { isoMicros } from './time.js';

/** What the renderers read of a slot: the world's columns and what it derives from them. */
export interface SlotReader {
  readonly table: SubscriberTable;
  idAt(slot: number): string;
  personAt(slot: number): { email: string; fields: SubscriberFields };
  statusAt(slot: number): SubscriberType;
  sourceAt(slot: number): string;
  /** A µs time as the legacy API writes it in the world's zone (`YYYY-MM-DD HH:MM:SS`), null when unset. */
  localDateTime(us: number | undefined): string | null;
  /** The day of a µs time in the world's zone, null when unset. */
  localDate(us: number | undefined): string | null;
  /** A custom field's type as the legacy API names it (`TEXT` for a key without a definition). */
  legacyFieldType(key: string): LegacyField['type'];
}

/** The campaign counts both shapes carry, and the rates they derive. */
function countsAt(t: SubscriberTable, slot: number): { sent: number; opens: number; clicks: number; openRate: number; clickRate: number } {
  const sent = t.sent[slot] ?? 0;
  const opens = t.opens[slot] ?? 0;
  const clicks = t.clicks[slot] ?? 0;
  return { sent, opens, clicks, openRate: rate(opens, sent), clickRate: rate(clicks, sent) };
}

export function legacySubscriber(r: SlotReader, slot: number): LegacySubscriber {
  const t = r.table;
  const person = r.personAt(slot);
  const counts = countsAt(t, slot);
  const created = t.createdUs[slot] ?? 0;
  return {
    id: r.idAt(slot),
    name: person.fields.name,
    email: person.email,
    sent: counts.sent,
    opened: counts.opens,
    opened_rate: counts.openRate,
    clicked: counts.clicks,
    clicked_rate: counts.clickRate,
    type: r.statusAt(slot),
    country_id: t.countryId[slot] ?? 0,
    signup_ip: ipToString(t.ip[slot] ?? 0),
    signup_timestamp: r.localDateTime(created),
    confirmation_ip: ipToString(t.optinIp[slot] ?? 0),
    confirmation_timestamp: r.localDateTime(t.optedInUs[slot]),
    fields: [
      { key: 'email', value: person.email, type: 'TEXT' },
      ...FIELD_KEYS.map((key) => ({ key, value: person.fields[key], type: r.legacyFieldType(key) })),
      ...Object.keys(person.fields)
        .filter((key) => !(FIELD_KEYS as readonly string[]).includes(key))
        .map((key) => ({ key, value: person.fields[key] as string, type: r.legacyFieldType(key) })),
    ],
    webform_subscribe_date: null,
    date_subscribe: r.localDate(t.subscribedUs[slot]),
    date_unsubscribe: r.localDateTime(t.unsubscribedUs[slot]),
    date_created: r.localDateTime(created) ?? '',
    date_updated: r.localDateTime(t.updatedUs[slot]) ?? '',
    user_agent: null,
  };
}

export function webhookSubscriber(r: SlotReader, slot: number): WebhookSubscriber {
  const t = r.table;
  const person = r.personAt(slot);
  const counts = countsAt(t, slot);
  return {
    id: r.idAt(slot),
    email: person.email,
    status: r.statusAt(slot),
    source: r.sourceAt(slot),
    sent: counts.sent,
    opens_count: counts.opens,
    clicks_count: counts.clicks,
    open_rate: counts.openRate,
    click_rate: counts.clickRate,
    ip_address: ipToString(t.ip[slot] ?? 0),
    subscribed_at: isoOrNull(t.subscribedUs[slot]),
    unsubscribed_at: isoOrNull(t.unsubscribedUs[slot]),
    created_at: isoMicros(t.createdUs[slot] ?? 0),
    updated_at: isoMicros(t.updatedUs[slot] ?? 0),
    deleted_at: isoOrNull(t.deletedUs.get(slot)),
    forget_at: isoOrNull(t.forgetUs.get(slot)),
    fields: { ...person.fields },
    opted_in_at: isoOrNull(t.optedInUs[slot]),
    optin_ip: ipToString(t.optinIp[slot] ?? 0),
  };
}

export function currentSubscriber(r: SlotReader, slot: number): Record<string, unknown> {
  const { deleted_at: _deleted, forget_at: _forget, ...listed } = webhookSubscriber(r, slot);
  const t = r.table;
  return {
    ...listed,
    subscribed_at: r.localDateTime(t.subscribedUs[slot]),
    unsubscribed_at: r.localDateTime(t.unsubscribedUs[slot]),
    created_at: r.localDateTime(t.createdUs[slot]),
    updated_at: r.localDateTime(t.updatedUs[slot]),
    opted_in_at: r.localDateTime(t.optedInUs[slot]),
  };
}

function isoOrNull(us: number | undefined): string | null {
  return us === undefined || Number.isNaN(us) ? null : isoMicros(us);
}
