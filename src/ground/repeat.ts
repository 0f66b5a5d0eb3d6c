/**
 * Background chores (sweeping the inbox, purging it, checking the poll schedules) run on a
 * self-rescheduling timer rather than setInterval: a run never overlaps the previous one, and the
 * next delay may depend on how the run went.
 */

export interface Repeating {
  /** No run starts after this; one already running finishes on its own. */
  stop(): void;
}

export interface RepeatOptions {
  /** Delay before the first run. */
  firstDelayMs: number;
  /** Delay before the next run, decided once a run has ended (`failed`: it threw). */
  nextDelayMs: (failed: boolean) => number;
  /** Called with what a run threw; the loop goes on. */
  onError: (error: unknown) => void;
}

/** Runs `task` after `firstDelayMs`, then again after each run ends. Timers never keep the process alive. */
export function repeat(task: () => Promise<unknown>, options: RepeatOptions): Repeating {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const schedule = (delayMs: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      task().then(
        () => schedule(options.nextDelayMs(false)),
        (error: unknown) => {
          options.onError(error);
          schedule(options.nextDelayMs(true));
        },
      );
    }, delayMs);
    timer.unref();
  };
  schedule(options.firstDelayMs);
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
