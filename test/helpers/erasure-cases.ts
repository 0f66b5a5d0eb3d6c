/**
 * Spellings erasure must see through, shared by the unit tests of the JavaScript rules and the
 * integration test that runs the same cases through their SQL twins.
 */

/** A link and what erasure leaves of it. */
export const LINK_CASES: Array<[string, string]> = [
  ['https://shop.example.com/offer?email=a%40b.example&x=1', 'https://shop.example.com/offer'],
  ['https://shop.example.com/offer#jane@example.com', 'https://shop.example.com/offer'],
  ['https://jane%40example.com:pw@shop.example.com/p?q', 'https://shop.example.com/p'],
  ['https://shop.example.com/plain/path', 'https://shop.example.com/plain/path'],
  ['not a url ?email=x', 'not a url '],
  ['https://shop.example.com/u/jane@example.com/offer', 'https://shop.example.com/u/-/offer'],
  ['https://shop.example.com/u/JANE%40EXAMPLE.COM/offer?x=1', 'https://shop.example.com/u/-/offer'],
  ['https://shop.example.com/r/to-jane%40example.com', 'https://shop.example.com/r/-'],
  ['mailto:jane@example.com', '-'],
];

/** Id spellings the normalizer accepts or refuses, as found in stored bodies. */
export const ID_SPELLINGS: readonly string[] = [
  '7',
  '007',
  '000',
  '0',
  ' 12 ',
  '\u00a0 42\n',
  '1261159647788771324',
  '0001261159647788771324',
  '7.0',
  '',
  'a1',
  '-5',
  '\u0663',
];
