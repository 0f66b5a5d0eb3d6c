/**
 * Reading `src/` as text, for the tests that check it without running it (the layers, the SQL that
 * names columns by hand).
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

export const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

/** Every `.ts` file below `dir` (not `.d.ts`), absolute paths. */
export function sourceFiles(dir = SRC): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(full);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [full] : [];
  });
}

/** A path relative to `src/`, with `/` separators. */
export const relativeToSrc = (file: string) => path.relative(SRC, file).split(path.sep).join('/');

/** The text of every string and template literal of a file (template holes become `${}`); no comments. */
export function literalTexts(source: ts.SourceFile): string[] {
  const out: string[] = [];
  const walk = (node: ts.Node): void => {
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) out.push(node.text);
    else if (ts.isTemplateExpression(node)) {
      out.push([node.head.text, ...node.templateSpans.map((s) => s.literal.text)].join('${}'));
    }
    ts.forEachChild(node, walk);
  };
  walk(source);
  return out;
}
