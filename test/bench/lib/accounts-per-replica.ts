/**
 * How many accounts one worker replica holds within a memory goal (the accounts benchmark's `sizes`
 * part, docs/benchmarks.md, "accounts"). One run's peak moves by some 15 MB from the next, more than
 * the goal's tenth of one account's, so a single deployment's ratio says little about where the
 * goal is crossed. A straight line through the peaks of several deployment sizes (one account alone
 * among them) is steadier: its slope is what an account adds to a replica reading it, and where it
 * crosses the goal is the most accounts a replica holds within it.
 */

/** One deployment: the accounts its one replica read, and the replica's peak RSS. */
export interface SizePeak {
  accounts: number;
  peakMb: number;
}

/** The least-squares line through the peaks: `peakMb ≈ interceptMb + perAccountMb × accounts`. */
export interface PeakLine {
  perAccountMb: number;
  interceptMb: number;
}

/** Null when the points cannot fix a line (fewer than two distinct sizes). */
export function fitPeaks(points: readonly SizePeak[]): PeakLine | null {
  const n = points.length;
  if (new Set(points.map((p) => p.accounts)).size < 2) return null;
  const meanX = points.reduce((s, p) => s + p.accounts, 0) / n;
  const meanY = points.reduce((s, p) => s + p.peakMb, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (const p of points) {
    sxy += (p.accounts - meanX) * (p.peakMb - meanY);
    sxx += (p.accounts - meanX) ** 2;
  }
  const perAccountMb = sxy / sxx;
  return { perAccountMb, interceptMb: meanY - perAccountMb * meanX };
}

/**
 * The most accounts one replica holds with its peak, on the line, within `ratio` × `baselineMb`;
 * null when an account adds nothing the line can tell (slope ≤ 0: every size is within the goal).
 * At least 1: one account is the baseline itself.
 */
export function accountsWithin(line: PeakLine, baselineMb: number, ratio: number): number | null {
  if (line.perAccountMb <= 0) return null;
  return Math.max(1, Math.floor((ratio * baselineMb - line.interceptMb) / line.perAccountMb));
}

/** The sizes the part runs by default: 4, 8, 12 and 16 below `n` (`n` itself is part `1`); one smaller size when none is. */
export function defaultSizes(n: number): number[] {
  const sizes = [4, 8, 12, 16].filter((k) => k < n);
  return sizes.length > 0 ? sizes : [Math.max(1, n - 1)];
}
