import type { AccessControl } from '../auth/access-control.js';
import type { SluiceConfig } from '../config/schema.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Router } from '../dispatch/router.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';

export interface Lifecycle {
  /** Set on shutdown: new requests get a 503 and readiness fails. */
  readonly draining: boolean;
}

/** What the request pipeline needs of the gateway: the one place fronts reach it through. */
export interface PipelineContext {
  readonly config: SluiceConfig;
  readonly log: Logger;
  readonly metrics: GatewayMetrics;
  readonly router: Router;
  readonly dispatcher: Dispatcher;
  readonly lifecycle: Lifecycle;
  readonly access: AccessControl;
  /** OpenTelemetry tracing; undefined when it is off (nothing is traced then). */
  readonly tracing: Tracing | undefined;
}
