/**
 * The parameter encodings `src/mirror/store.ts` uses (kept private there), for baselines that must
 * pay the same client-side costs: a quoted array literal per column, and one JSON array per jsonb
 * column expanded with `jsonb_array_elements … with ordinality`.
 */
export function arrayLiteral(values: readonly unknown[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    const v = values[i];
    if (v === null || v === undefined) {
      out += 'NULL';
      continue;
    }
    const text = typeof v === 'string' ? v : String(v);
    out += text.includes('"') || text.includes('\\') ? `"${text.replace(/["\\]/g, '\\$&')}"` : `"${text}"`;
  }
  return `${out}}`;
}

export function jsonbArrayFromParam(param: string): string {
  return `array(select e from jsonb_array_elements(${param}::jsonb) with ordinality as x(e, o) order by o)`;
}
