/**
 * Text from the service (webhook names and URLs, error messages) on its way to a terminal. A name
 * holding an escape sequence could otherwise rewrite what the operator sees (move the cursor, set the
 * window title, put text on the clipboard, hide a line), so every control character becomes a
 * visible `\u001b`-style escape: the text stays readable and nothing is executed. Tab and line feed
 * stay (our own output is multi-line); carriage return does not (it overwrites the line shown).
 */

/** C0 controls but tab and line feed, DEL, C1 controls, and the bidirectional overrides and isolates. */
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** `text` with every terminal control character shown as a `\uXXXX` escape. */
export function printable(text: string): string {
  return text.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
