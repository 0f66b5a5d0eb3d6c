/**
 * Runs an HTTP load generator script in a separate node process (so its CPU does not count against
 * the process under test) and returns the JSON it prints on stdout.
 */
import { spawn } from 'node:child_process';

/** Runs `node -e script '<config as JSON>'`; resolves with its stdout parsed as JSON. */
export function runLoadGenerator<T>(script: string, config: object): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', script, JSON.stringify(config)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) reject(new Error(`load generator exited with ${code}`));
      else resolve(JSON.parse(out) as T);
    });
  });
}
