/**
 * The data the page renders: the server's own snapshot types (imported, not copied), so that a
 * change of the snapshot that the page does not follow fails to compile.
 */
import type { DashboardSnapshot } from '../snapshot-types.js';

export type { DashboardModel, DashboardSnapshot, DashboardWorker } from '../snapshot-types.js';

export type RecentRequest = DashboardSnapshot['recent'][number];
export type SeriesModel = DashboardSnapshot['series']['models'][number];
export type FailureCount = DashboardSnapshot['streamFailures']['byReason'][number];
