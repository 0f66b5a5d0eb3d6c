/**
 * Settings read from the environment, each declared once: its variable (and other names), what
 * values it takes, its default and one line for the docs. From a tree of declarations come the zod
 * schema that parses the environment, the type of the parsed values (the tree's shape), the table in
 * docs/operations.md ("Configuration") and the secrets to keep out of messages and logs.
 *
 * A setting's parser sees text only: a blank variable counts as unset, and a setting none of whose
 * names is given gets its default (parsed like any value) or stays undefined.
 */
import { isIP } from 'node:net';
import { z } from 'zod';

/** What a setting accepts: the parser of its text, and how the docs table describes the values. */
export interface Kind<T> {
  readonly schema: z.ZodType<T, string>;
  readonly values: string;
}

interface Declaration {
  /** One line for the docs table (Markdown): what the setting does. */
  readonly doc: string;
  /** Used when the variable is unset or blank; parsed like a given value. */
  readonly default?: string;
  /** The docs' default column when there is no default to show ("none" otherwise). */
  readonly unset?: string;
  /** Other names of the same setting: either sets it; both given and different is an error. */
  readonly aliases?: readonly string[];
  /** Never printed: messages name the variable only, and `secretValues` lists it for redaction. */
  readonly secret?: boolean;
  /** Says who an account is at the service or what to read: one value per account (the docs table says so). */
  readonly perAccount?: boolean;
}

export interface Setting<T, N extends string = string> {
  /** Every name of the setting, the documented one first. */
  readonly names: readonly [N, ...N[]];
  readonly kind: Kind<unknown>;
  readonly declaration: Declaration;
  /** The parser of the setting given one text: blank → default → the kind's schema (undefined stays undefined). */
  readonly schema: z.ZodType<T>;
}

export type SettingsTree = { readonly [key: string]: Setting<unknown> | SettingsTree };

/** The parsed values: the tree's shape with each setting replaced by its value. */
export type ValuesOf<T> = T extends Setting<infer V> ? V : { -readonly [K in keyof T]: ValuesOf<T[K]> };

/** Every variable name (aliases too) of a tree. */
export type NamesOf<T> = T extends Setting<unknown, infer N> ? N : { [K in keyof T]: NamesOf<T[K]> }[keyof T];

/** Where a problem is reported: the variable it is about, and what is wrong (never a secret's value). */
export type Report<N extends string = string> = (name: N, message: string) => void;

const isBlank = (v: unknown) => v === undefined || (typeof v === 'string' && v.trim() === '');

export function setting<const N extends string, T, const A extends string = never>(
  name: N,
  kind: Kind<T>,
  declaration: Declaration & { default: string; aliases?: readonly A[] },
): Setting<T, N | A>;
export function setting<const N extends string, T, const A extends string = never>(
  name: N,
  kind: Kind<T>,
  declaration: Declaration & { aliases?: readonly A[] },
): Setting<T | undefined, N | A>;
export function setting<T>(name: string, kind: Kind<T>, declaration: Declaration): Setting<T | undefined> {
  const fallback = declaration.default;
  const parse = fallback === undefined ? kind.schema.optional() : kind.schema;
  return {
    names: [name, ...(declaration.aliases ?? [])],
    kind,
    declaration,
    schema: z.preprocess((raw) => (isBlank(raw) ? fallback : raw), parse),
  };
}

const isSetting = (node: Setting<unknown> | SettingsTree): node is Setting<unknown> =>
  Array.isArray((node as Partial<Setting<unknown>>).names);

/** The settings of a tree in declaration order (the order of the docs table). */
export function settingsOf(tree: SettingsTree): Setting<unknown>[] {
  return Object.values(tree).flatMap((node) => (isSetting(node) ? [node] : settingsOf(node)));
}

/**
 * The same tree with other names for some settings (`namesOf` returns them, or undefined to keep a
 * setting's own): one tree per account, whose settings read that account's variables.
 */
export function renamed<T extends SettingsTree>(tree: T, namesOf: (s: Setting<unknown>) => readonly [string, ...string[]] | undefined): T {
  const entries = Object.entries(tree).map(([key, node]) => [
    key,
    isSetting(node) ? { ...node, names: namesOf(node) ?? node.names } : renamed(node, namesOf),
  ]);
  return Object.fromEntries(entries) as T;
}

/**
 * One zod object over every variable name (a blank or unset one is undefined); its output is turned
 * into the tree's shape, defaults included, by `valuesOf`.
 */
export function variablesSchema(tree: SettingsTree): z.ZodObject<Record<string, z.ZodType>> {
  const given = (s: Setting<unknown>) => z.preprocess((raw) => (isBlank(raw) ? undefined : raw), s.kind.schema.optional());
  return z.object(Object.fromEntries(settingsOf(tree).flatMap((s) => s.names.map((name) => [name, given(s)]))));
}

/**
 * The value of one setting under whichever of its names was given, else its default; different
 * values are reported. The default comes after the choice, so that an unset name never looks given.
 */
function valueOf(s: Setting<unknown>, variables: Record<string, unknown>, report: Report): unknown {
  const given = s.names.filter((name) => variables[name] !== undefined);
  const [first, ...others] = given;
  if (first === undefined) return s.schema.parse(undefined);
  for (const other of others) {
    if (JSON.stringify(variables[other]) !== JSON.stringify(variables[first])) {
      report(first, `differs from ${other}, another name of the same setting; set one of them`);
    }
  }
  return variables[first];
}

/** The parsed variables in the tree's shape. */
export function valuesOf<T extends SettingsTree>(tree: T, variables: Record<string, unknown>, report: Report): ValuesOf<T> {
  const entries = Object.entries(tree).map(([key, node]) => [
    key,
    isSetting(node) ? valueOf(node, variables, report) : valuesOf(node, variables, report),
  ]);
  return Object.fromEntries(entries) as ValuesOf<T>;
}

const textsOf = (value: unknown): string[] =>
  typeof value === 'string' ? [value] : Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];

/** The values of the secret settings in parsed values of the tree (for redaction). */
export function secretValues(tree: SettingsTree, values: unknown): string[] {
  const found = Object.entries(tree).flatMap(([key, node]) => {
    const value = (values as Record<string, unknown> | undefined)?.[key];
    if (!isSetting(node)) return secretValues(node, value);
    return node.declaration.secret ? textsOf(value) : [];
  });
  return [...new Set(found.filter((s) => s.length > 0))];
}

/** Each secret setting given (of those `which` picks), named by the first of its names given, with its parsed values. */
export function givenSecrets(
  tree: SettingsTree,
  variables: Record<string, unknown>,
  which: (s: Setting<unknown>) => boolean = () => true,
): Array<{ name: string; values: string[] }> {
  return settingsOf(tree)
    .filter((s) => s.declaration.secret && which(s))
    .flatMap((s) => {
      const name = s.names.find((n) => variables[n] !== undefined);
      return name === undefined ? [] : [{ name, values: textsOf(variables[name]).filter((v) => v.length > 0) }];
    });
}

/**
 * The raw text of the secret variables (each comma-separated part too), for when the environment
 * does not parse and no values exist to take them from.
 */
export function rawSecretValues(tree: SettingsTree, env: NodeJS.ProcessEnv): string[] {
  const raw = settingsOf(tree)
    .filter((s) => s.declaration.secret)
    .flatMap((s) => s.names.map((name) => env[name]?.trim() ?? ''))
    .flatMap((v) => [v, ...commaList(v)]);
  return [...new Set(raw.filter((s) => s.length > 0))];
}

// ---------------------------------------------------------------------------------------------
// The docs table

const code = (text: string) => `\`${text}\``;
const cell = (text: string) => text.replace(/\|/g, '\\|').replace(/\n/g, ' ');

function defaultCell({ declaration }: Setting<unknown>): string {
  if (declaration.default !== undefined && declaration.default !== '') return code(declaration.default);
  return declaration.unset ?? 'none';
}

function row(s: Setting<unknown>): string {
  const [name, ...aliases] = s.names;
  const names = code(name) + (aliases.length > 0 ? ` (alias ${aliases.map(code).join(', ')})` : '');
  const values =
    s.kind.values + (s.declaration.secret ? '; secret: never printed' : '') + (s.declaration.perAccount ? '; per account' : '');
  return `| ${[names, s.declaration.doc, values, defaultCell(s)].map(cell).join(' | ')} |`;
}

/** The Markdown table of every setting: name (and aliases), meaning, values, default. */
export function settingsTable(tree: SettingsTree): string {
  return ['| variable | meaning | values | default |', '|---|---|---|---|', ...settingsOf(tree).map(row)].join('\n');
}

// ---------------------------------------------------------------------------------------------
// Kinds

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Parses `250ms`, `30s`, `5m`, `24h`, `1d` into milliseconds; anything else is rejected. */
export function parseDuration(text: string): number {
  const match = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim());
  if (!match) throw new Error(`"${text}" is not a duration (use e.g. 30s, 5m, 24h, 1d)`);
  const value = Number(match[1]) * (DURATION_UNITS[match[2] as string] as number);
  if (!Number.isSafeInteger(value)) throw new Error(`"${text}" is too large`);
  return value;
}

export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

/** Adds one issue and returns the value zod discards. */
function fail(ctx: z.RefinementCtx, message: string): never {
  ctx.addIssue({ code: 'custom', message });
  return z.NEVER;
}

export const commaList = (v: string | undefined): string[] =>
  (v ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);

/** A duration in milliseconds, at least `min` (a duration itself). */
export function duration({ min = '0ms' }: { min?: string } = {}): Kind<number> {
  const minMs = parseDuration(min);
  return {
    schema: z.string().transform((v, ctx) => {
      let ms: number;
      try {
        ms = parseDuration(v);
      } catch (error) {
        return fail(ctx, (error as Error).message);
      }
      return ms < minMs ? fail(ctx, `"${v}" is shorter than ${formatDuration(minMs)}`) : ms;
    }),
    values: minMs > 0 ? `duration, at least ${code(formatDuration(minMs))}` : 'duration',
  };
}

export function wholeNumber(min: number, max: number): Kind<number> {
  return {
    schema: z.string().transform((v, ctx) => {
      if (!/^\d+$/.test(v.trim())) return fail(ctx, `"${v}" is not a whole number`);
      const n = Number(v);
      return n < min || n > max ? fail(ctx, `${n} is outside ${min}..${max}`) : n;
    }),
    values: `whole number, ${min}..${max}`,
  };
}

/** A whole number in `min..max`, or the one word `word` (any case). */
export function wholeNumberOr<const W extends string>(word: W, min: number, max: number): Kind<number | W> {
  const numbers = wholeNumber(min, max);
  return {
    schema: z.string().transform((v, ctx): number | W => {
      if (v.trim().toLowerCase() === word) return word;
      const parsed = numbers.schema.safeParse(v);
      return parsed.success ? parsed.data : fail(ctx, `${parsed.error.issues[0]?.message ?? `"${v}" is not valid`} (nor ${word})`);
    }),
    values: `${code(word)} or whole number, ${min}..${max}`,
  };
}

/** One of a few words, any case. */
export function oneOf<const V extends readonly [string, ...string[]]>(options: V): Kind<V[number]> {
  const listed = options.length === 2 ? options.join(' or ') : `one of ${options.join(', ')}`;
  return {
    schema: z
      .string()
      .transform((v) => v.trim().toLowerCase())
      .pipe(z.enum(options, { message: `must be ${listed}` })),
    values: options.map(code).join(', '),
  };
}

const FLAG_WORDS: Record<string, boolean> = { true: true, false: false, 1: true, 0: false, yes: true, no: false };

/** `true`/`false` (any case; also 1/0, yes/no). */
export const flag: Kind<boolean> = {
  schema: z.string().transform((v, ctx) => FLAG_WORDS[v.trim().toLowerCase()] ?? fail(ctx, 'must be true or false')),
  values: '`true` or `false`',
};

/** Any text (keys, tokens). */
export const anyText: Kind<string> = { schema: z.string(), values: 'text' };

/** Text matching `pattern`; `rule` completes both "must be …" and the docs' values. */
export function text(pattern: RegExp, rule: string): Kind<string> {
  return { schema: z.string().regex(pattern, `must be ${rule}`), values: rule };
}

/** Text of at least `min` characters; `why` says what the length protects. */
export function minLength(min: number, why: string): Kind<string> {
  return { schema: z.string().min(min, `must be at least ${min} characters (${why})`), values: `at least ${min} characters` };
}

/** An http(s) URL, without trailing slashes; `what` says which host is meant. */
export function httpUrl(what: string): Kind<string> {
  return {
    schema: z
      .string()
      .refine((v) => /^https?:\/\/[^\s/]+/.test(v) && URL.canParse(v), `must be an http(s) URL (${what})`)
      .transform((v) => v.replace(/\/+$/, '')),
    values: 'http(s) URL',
  };
}

/** A URL of one scheme (a database's). */
export function schemeUrl(scheme: RegExp, example: string): Kind<string> {
  return {
    schema: z.string().refine((v) => scheme.test(v) && URL.canParse(v), `must be a URL like ${example}`),
    values: `URL like ${code(example)}`,
  };
}

function isValidTimezone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

export const timezone: Kind<string> = {
  schema: z.string().refine(isValidTimezone, 'must be an IANA timezone such as UTC or Europe/Vilnius'),
  values: 'IANA timezone',
};

/** An IP address or a host name to bind a listener to. */
export const bindAddress: Kind<string> = {
  schema: z
    .string()
    .refine(
      (v) => isIP(v) !== 0 || /^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$/.test(v),
      'must be an IP address (e.g. 127.0.0.1, 0.0.0.0, ::) or a host name',
    ),
  values: 'IP address or host name',
};

/** `on`/`off` (any case) as true/false. */
export const onOff: Kind<boolean> = {
  schema: oneOf(['on', 'off']).schema.transform((v) => v === 'on'),
  values: '`on` or `off`',
};
