import type { CompactPipelineContext } from '../pipeline/run-compact.js';
import type { ResponsePipelineContext } from '../pipeline/run-response.js';
import type { SharingSnapshot } from '../replicas/index.js';
import type { ConversationsService } from '../responses/conversations.js';
import type { Store } from '../storage/types.js';
import type { RequestRegistry } from '../streams/request-registry.js';
import type { HealthChecker } from '../workers/health-checker.js';
import type { WorkerRegistry } from '../workers/registry.js';

export type { Lifecycle } from '../pipeline/context.js';

/**
 * What the HTTP layer needs from the gateway's domain objects: what the pipeline needs, and what
 * the read and admin routes use besides (workers, health, stored objects).
 */
export interface GatewayContext extends ResponsePipelineContext, Omit<CompactPipelineContext, 'responses'> {
  readonly registry: WorkerRegistry;
  readonly health: HealthChecker;
  readonly requests: RequestRegistry;
  readonly store: Store | undefined;
  readonly conversations: ConversationsService;
  /** What replicas share through Redis (`GET /admin/replicas`). */
  readonly sharing?: { snapshot(): SharingSnapshot };
}
