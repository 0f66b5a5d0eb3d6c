/**
 * The service's custom field definitions (docs/upstream.md, "Field definitions"; docs/upstream-current.md,
 * "Field definitions"): what each key of a subscriber's `fields` is. Both interfaces' answers are
 * validated here and turned into one shape; a body that is not a list of definitions is an
 * {@link UpstreamBodyError}, never a partial answer.
 */
import { FIELD_TYPES, type FieldType } from '../db/schema.js';
import { UpstreamBodyError, type RequestTarget } from './errors.js';

export interface FieldDefinition {
  key: string;
  title: string | null;
  type: FieldType;
  upstreamId: string | null;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The type as the service names it: `text`, `number`, `date` (the current API; the legacy one in
 * capitals, as its subscriber `fields` carry them). Any other type (a future one) is kept as text:
 * its values still reach `subscriber_fields`, untyped.
 */
export function fieldTypeOf(value: unknown): FieldType {
  const lower = typeof value === 'string' ? value.trim().toLowerCase() : '';
  return (FIELD_TYPES as readonly string[]).includes(lower) ? (lower as FieldType) : 'text';
}

function idOf(value: unknown): string | null {
  if (typeof value === 'string' && value !== '') return value;
  if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value);
  return null;
}

/** One definition of either interface: `key` is required; the title is `title` (legacy) or `name` (current). */
function definitionOf(item: unknown): FieldDefinition | null {
  if (!isRecord(item) || typeof item.key !== 'string' || item.key.trim() === '') return null;
  const title = typeof item.title === 'string' ? item.title : typeof item.name === 'string' ? item.name : null;
  return { key: item.key, title, type: fieldTypeOf(item.type), upstreamId: idOf(item.id) };
}

function definitionsOf(items: unknown, target: RequestTarget, status: number): FieldDefinition[] {
  if (!Array.isArray(items))
    throw new UpstreamBodyError(`${target.label} answered no list of fields on ${target.method} ${target.path}`, target, status);
  const out: FieldDefinition[] = [];
  for (const item of items) {
    const definition = definitionOf(item);
    if (!definition) {
      throw new UpstreamBodyError(`${target.label} answered a field without a key on ${target.method} ${target.path}`, target, status);
    }
    out.push(definition);
  }
  return out;
}

/** The legacy answer: a bare array of `{id, title, key, type}`. */
export function legacyFieldDefinitions(body: unknown, target: RequestTarget, status: number): FieldDefinition[] {
  return definitionsOf(body, target, status);
}

/** One page of the current answer (`{data, links}`): its definitions and the next page's URL, if any. */
export function currentFieldPage(body: unknown, target: RequestTarget, status: number): { fields: FieldDefinition[]; next: string | null } {
  if (!isRecord(body))
    throw new UpstreamBodyError(`${target.label} answered no page of fields on ${target.method} ${target.path}`, target, status);
  const links = isRecord(body.links) ? body.links : {};
  return {
    fields: definitionsOf(body.data, target, status),
    next: typeof links.next === 'string' && links.next !== '' ? links.next : null,
  };
}
