import { describe, expect, it } from 'vitest';
import { printable } from '../../src/ground/terminal.js';

describe('printable', () => {
  it.each([
    ['plain text', 'subscriber-mirror (real-time) https://x.test/a?b=1', 'subscriber-mirror (real-time) https://x.test/a?b=1'],
    ['keeps tabs and newlines', 'a\tb\nc', 'a\tb\nc'],
    ['CSI sequence', 'x\u001b[2Jy', 'x\\u001b[2Jy'],
    ['OSC title with BEL', '\u001b]0;t\u0007', '\\u001b]0;t\\u0007'],
    ['carriage return', 'ok\rfake', 'ok\\u000dfake'],
    ['DEL and C1 CSI', '\u007f\u009b31m', '\\u007f\\u009b31m'],
    ['bidi override', 'abc\u202edcb', 'abc\\u202edcb'],
    ['non-ASCII text stays', 'Zoë ✓ 日本', 'Zoë ✓ 日本'],
  ])('%s', (_name, input, expected) => {
    expect(printable(input)).toBe(expected);
  });
});
