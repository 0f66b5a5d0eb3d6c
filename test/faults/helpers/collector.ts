/**
 * Every byte the service's child processes print (stdout and stderr, log lines and one-line CLI
 * errors), kept per test file so a final test can scan it all for secrets (invariant 10).
 *
 * Secrets are registered with a label as a test creates them (API key, tokens, webhook secrets,
 * passwords in URLs); the scan looks for each full value and for its random tail, so a secret that
 * was cut or prefixed still counts. Set FAULTS_LOG_DIR to also write each process's output to a file.
 */
import type { ChildProcess } from 'node:child_process';
import { appendFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';

export interface CapturedChunk {
  source: string;
  stream: 'stdout' | 'stderr';
  text: string;
}

export interface SecretLeak {
  label: string;
  source: string;
  stream: 'stdout' | 'stderr';
  /** The line around the hit, with the secret itself masked so the report does not leak it again. */
  excerpt: string;
}

const chunks: CapturedChunk[] = [];
const secrets = new Map<string, string>();
let sources = 0;

/** Remembers a value that must never be printed; `label` names it in failure messages. */
export function registerSecret(label: string, value: string): void {
  if (value.length < 8) throw new Error(`secret ${label} is too short to scan for meaningfully`);
  secrets.set(value, label);
}

function registeredSecrets(): Array<{ label: string; value: string }> {
  return [...secrets].map(([value, label]) => ({ label, value }));
}

export function record(source: string, stream: 'stdout' | 'stderr', text: string): void {
  if (text.length === 0) return;
  chunks.push({ source, stream, text });
  const dir = process.env.FAULTS_LOG_DIR;
  if (dir) {
    mkdirSync(dir, { recursive: true });
    appendFileSync(path.join(dir, `${source.replace(/[^\w.-]+/g, '_')}.${stream}.log`), text);
  }
}

/** Feeds a child's stdout and stderr to the collector; `onLine` sees each complete stdout line. */
export function capture(child: ChildProcess, label: string, onLine?: (line: string) => void): string {
  const source = `${label}#${++sources}(pid ${child.pid ?? '?'})`;
  let pending = '';
  child.stdout?.on('data', (d: Buffer) => {
    const text = d.toString('utf8');
    record(source, 'stdout', text);
    if (!onLine) return;
    pending += text;
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      onLine(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
    }
  });
  child.stderr?.on('data', (d: Buffer) => record(source, 'stderr', d.toString('utf8')));
  return source;
}

function capturedStats(): { processes: number; chunks: number; lines: number; bytes: number } {
  let lines = 0;
  let bytes = 0;
  const seen = new Set<string>();
  for (const c of chunks) {
    seen.add(c.source);
    bytes += c.text.length;
    for (let i = c.text.indexOf('\n'); i >= 0; i = c.text.indexOf('\n', i + 1)) lines++;
  }
  return { processes: seen.size, chunks: chunks.length, lines, bytes };
}

/** Random tail of a distinctive secret (`fault-apikey-Q7w9Zr2Lx5` → `Q7w9Zr2Lx5`), or the value. */
function needlesOf(value: string): string[] {
  const tail = value.split(/[-_:@/]/).pop() ?? value;
  return tail.length >= 8 && tail !== value ? [value, tail] : [value];
}

/**
 * Every occurrence of a registered secret in everything captured so far. Each process's stream is
 * joined first: a pipe may split a line, and with it a secret, across two chunks.
 */
function findSecretLeaks(extraText: Array<{ source: string; text: string }> = []): SecretLeak[] {
  const streams = new Map<string, { source: string; stream: 'stdout' | 'stderr'; text: string }>();
  for (const c of [...chunks, ...extraText.map((t) => ({ ...t, stream: 'stdout' as const }))]) {
    const key = `${c.source}\u0000${c.stream}`;
    const entry = streams.get(key) ?? { source: c.source, stream: c.stream, text: '' };
    entry.text += c.text;
    streams.set(key, entry);
  }
  const leaks: SecretLeak[] = [];
  for (const [value, label] of secrets) {
    for (const needle of needlesOf(value)) {
      for (const s of streams.values()) {
        for (let at = s.text.indexOf(needle); at >= 0; at = s.text.indexOf(needle, at + needle.length)) {
          const start = s.text.lastIndexOf('\n', at) + 1;
          const end = s.text.indexOf('\n', at);
          const line = s.text.slice(start, end < 0 ? undefined : end);
          leaks.push({ label, source: s.source, stream: s.stream, excerpt: line.split(needle).join('<SECRET>').slice(0, 400) });
        }
      }
    }
  }
  return leaks;
}

/**
 * The final check of every fault file: at least `minLines` lines were captured (the scan had
 * something to read), the scan does find a registered secret when one is planted (it is not
 * vacuous), and nothing the processes printed holds one. Returns figures for the summary.
 */
export function secretScanFigures(minLines: number): {
  processes: number;
  linesScanned: number;
  secretsLookedFor: number;
  leaks: SecretLeak[];
} {
  const planted = registeredSecrets()[0];
  if (!planted) throw new Error('no secret registered: the scan would be vacuous');
  const probe = findSecretLeaks([{ source: 'planted', text: `a line with ${planted.value} in it\n` }]).filter(
    (l) => l.source === 'planted',
  );
  if (probe.length === 0) throw new Error('the secret scan does not find a planted secret');
  const stats = capturedStats();
  if (stats.lines < minLines) throw new Error(`only ${stats.lines} lines captured, expected at least ${minLines}`);
  return { processes: stats.processes, linesScanned: stats.lines, secretsLookedFor: secrets.size, leaks: findSecretLeaks() };
}
