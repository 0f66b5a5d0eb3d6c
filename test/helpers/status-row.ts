/** A status row as the status reader returns it, healthy by default: the fixture of the status tests. */
import { noAuditFigure, type StatusRow } from '../../src/sync/status.js';

export function statusRow(over: Partial<StatusRow> = {}): StatusRow {
  return {
    account: 'default',
    groupId: '1',
    type: 'active',
    cursor: '2026-11-26T11:58:00.000000Z',
    lastStatus: 'succeeded',
    lastMode: 'incremental',
    lastRunFinishedAt: '2026-11-26T11:59:00Z',
    lastSuccessAt: '2026-11-26T11:59:00Z',
    lastError: null,
    fullPassOpenAt: null,
    mirrored: 990,
    upstreamCount: 1000,
    upstreamCountAt: '2026-11-26T00:00:00Z',
    drift: 10,
    futureRows: 0,
    awaitingProof: 0,
    stepBacks: 0,
    audit: noAuditFigure(),
    auditPeriod: null,
    ...over,
  };
}
