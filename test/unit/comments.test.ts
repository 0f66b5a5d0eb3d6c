/**
 * What a comment in `src/` may point to: a heading of `docs/` or an invariant number
 * (docs/architecture.md, "Invariants"). Issue numbers and sections of a spec that is not in the
 * repository lead a newcomer nowhere, so this fails on them; the `docs/…` paths comments name must exist,
 * and so must the source files they name (`../store.ts`, `legacy.ts` after the file moved or split).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SRC = path.join(ROOT, 'src');
const TEST = path.join(ROOT, 'test');

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return filesUnder(full);
    return /\.(ts|md)$/.test(e.name) ? [full] : [];
  });
}

/** Pointers a reader cannot follow from this repository. */
const UNFOLLOWABLE: ReadonlyArray<{ what: string; pattern: RegExp }> = [
  { what: 'a spec section (§N)', pattern: /§\s?\d/ },
  { what: 'an issue number', pattern: /\b[Ii]ssues?\s*#?\d+|(?:^|[\s(])#\d+\b/ },
];

/** `file:line: text` for each line of `text` that matches one of the patterns. */
function unfollowablePointers(file: string, text: string): string[] {
  return text
    .split('\n')
    .flatMap((line, i) =>
      UNFOLLOWABLE.filter(({ pattern }) => pattern.test(line)).map(({ what }) => `${file}:${i + 1}: ${what}: ${line.trim()}`),
    );
}

/** The `docs/<name>.md` paths a text names. */
function docsNamed(text: string): string[] {
  return [...new Set([...text.matchAll(/\bdocs\/([\w.-]+\.md)\b/g)].map((m) => m[1] as string))];
}

/** Every file of the repository's code and tests, relative to the root with `/` separators. */
const CODE_FILES = [SRC, TEST].flatMap((dir) =>
  readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => path.relative(ROOT, path.join(e.parentPath, e.name)).split(path.sep).join('/')),
);

/**
 * The `.ts` files a text names (`src/sync/state.ts`, `../store.ts`, `legacy/client.ts`, `index.ts`)
 * that do not exist: a name is found from the repository's root, from the naming file's folder, or
 * (without `./` or `../`) as the end of a path under `src/` or `test/`. Globs (`*.test.ts`) are not names.
 */
function missingSources(file: string, text: string, known: readonly string[] = CODE_FILES): string[] {
  const dir = path.posix.dirname(file);
  const exists = (ref: string): boolean =>
    known.includes(path.posix.normalize(ref)) ||
    known.includes(path.posix.join(dir, ref)) ||
    (!ref.startsWith('.') && known.some((k) => k.endsWith(`/${ref}`)));
  return [...new Set([...text.matchAll(/(?<![\w.*/-])((?:\.{1,2}\/)*[\w-][\w./-]*\.ts)\b/g)].map((m) => m[1] as string))]
    .filter((ref) => !exists(ref))
    .map((ref) => `${file}: ${ref}`);
}

describe('comments in src point only where a newcomer can follow', () => {
  const files = filesUnder(SRC).map((f) => ({ file: path.relative(ROOT, f), text: readFileSync(f, 'utf8') }));

  test('no issue numbers and no spec sections', () => {
    expect(files.flatMap(({ file, text }) => unfollowablePointers(file, text))).toEqual([]);
  });

  test('every docs/ page a comment names exists', () => {
    const missing = files.flatMap(({ file, text }) =>
      docsNamed(text)
        .filter((doc) => !existsSync(path.join(ROOT, 'docs', doc)))
        .map((doc) => `${file}: docs/${doc}`),
    );
    expect(missing).toEqual([]);
  });

  test('every source file a comment names exists', () => {
    expect(files.flatMap(({ file, text }) => missingSources(file, text))).toEqual([]);
  });

  test('the check itself finds each kind of pointer', () => {
    const known = ['src/mirror/store/index.ts', 'src/upstream/legacy/client.ts', 'src/sync/state.ts'];
    expect(missingSources('src/mirror/store/subscribers.ts', 'See `../store.ts` and `index.ts`.', known)).toEqual([
      'src/mirror/store/subscribers.ts: ../store.ts',
    ]);
    expect(missingSources('src/upstream/http.ts', 'by `legacy.ts` and `legacy/client.ts`, see *.test.ts', known)).toEqual([
      'src/upstream/http.ts: legacy.ts',
    ]);
    expect(missingSources('src/upstream/legacy/paging.ts', '`client.ts` runs it; src/sync/state.ts keeps it', known)).toEqual([]);
    expect(unfollowablePointers('x.ts', ' * the §2.2 shape')).toHaveLength(1);
    expect(unfollowablePointers('x.ts', ' * (issue 22)')).toHaveLength(1);
    expect(unfollowablePointers('x.ts', ' * (issue #13)')).toHaveLength(1);
    expect(unfollowablePointers('x.ts', ' * as in #12')).toHaveLength(1);
    expect(unfollowablePointers('x.ts', ' * invariant 11; docs/architecture.md, "Proof in rounds"')).toEqual([]);
    expect(docsNamed('see docs/nowhere.md and docs/sql.md')).toEqual(['nowhere.md', 'sql.md']);
  });
});
