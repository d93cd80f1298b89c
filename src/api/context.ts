import type { AccessControl } from '../auth/access-control.js';
import type { SluiceConfig } from '../config/schema.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Router } from '../dispatch/router.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import type { ConversationsService } from '../responses/conversations.js';
import type { ResponsesService } from '../responses/service.js';
import type { Store } from '../storage/types.js';
import type { RequestRegistry } from '../streams/request-registry.js';
import type { HealthChecker } from '../workers/health-checker.js';
import type { WorkerRegistry } from '../workers/registry.js';

export interface Lifecycle {
  /** Set on shutdown: new requests get a 503 and readiness fails. */
  readonly draining: boolean;
}

/** What the HTTP layer needs from the gateway's domain objects. */
export interface GatewayContext {
  readonly config: SluiceConfig;
  readonly log: Logger;
  readonly metrics: GatewayMetrics;
  readonly registry: WorkerRegistry;
  readonly health: HealthChecker;
  readonly router: Router;
  readonly dispatcher: Dispatcher;
  readonly requests: RequestRegistry;
  readonly lifecycle: Lifecycle;
  readonly store: Store | undefined;
  readonly access: AccessControl;
  readonly responses: ResponsesService;
  readonly conversations: ConversationsService;
  /** OpenTelemetry tracing; undefined when it is off (nothing is traced then). */
  readonly tracing: Tracing | undefined;
}
