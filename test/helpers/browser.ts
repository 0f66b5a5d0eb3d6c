/**
 * Debian's chromium driven by playwright-core (never `playwright install`: no browser download), with
 * the flags that keep it off the network and a fresh profile per launch.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { requirePath, systemTool, type Tool } from './tools.js';

export const chromiumTool: Tool = systemTool('chromium', 'chromium');

export const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

/** A fresh --user-data-dir (playwright passes it for a persistent context) that is removed on close. */
export async function launchChromium(options: { httpCredentials?: { username: string; password: string } } = {}): Promise<Browser> {
  const userDataDir = mkdtempSync(path.join(tmpdir(), 'sm-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: requirePath(chromiumTool),
    headless: true,
    args: CHROMIUM_FLAGS,
    viewport: { width: 1280, height: 900 },
    ...(options.httpCredentials ? { httpCredentials: options.httpCredentials } : {}),
  });
  return {
    context,
    async close() {
      await context.close().catch(() => {});
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}
