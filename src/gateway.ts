import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { GatewayContext } from './api/context.js';
import { buildServer } from './api/server.js';
import { AccessControl } from './auth/access-control.js';
import { ModelSettings } from './config/model-settings.js';
import type { SluiceConfig } from './config/schema.js';
import { KubernetesDiscovery } from './discovery/kubernetes.js';
import { Dispatcher } from './dispatch/dispatcher.js';
import type { RetryTiming } from './dispatch/retry-backoff.js';
import { Router } from './dispatch/router.js';
import { GatewayShuttingDown } from './errors/http-errors.js';
import { ClientClosed, DispatcherClosed } from './errors/stream-errors.js';
import { FlowControl } from './flow/flow-control.js';
import { defaultHeldBudget, HeldBytes } from './memory/held-bytes.js';
import { IdleCollection } from './memory/idle-collection.js';
import { createLogger, type Logger } from './observability/logger.js';
import { GatewayMetrics } from './observability/metrics.js';
import { Tracing } from './observability/tracing.js';
import { countRunEnd } from './pipeline/request-observer.js';
import { ReplicaSharing } from './replicas/index.js';
import { ConversationsService } from './responses/conversations.js';
import { McpTools } from './responses/mcp-loop.js';
import { OrphanSweeper } from './responses/orphan-sweeper.js';
import { PdfReader } from './responses/pdf-reader.js';
import { ResponsesService } from './responses/service.js';
import { createStore } from './storage/index.js';
import { ReplicaLease } from './storage/replica-lease.js';
import type { KeyStore, Store } from './storage/types.js';
import { RequestRegistry } from './streams/request-registry.js';
import { HealthChecker } from './workers/health-checker.js';
import { WorkerRegistry } from './workers/registry.js';
import { SignalScraper } from './workers/signal-scraper.js';

export interface GatewayOptions {
  logger?: Logger;
  /** Register process-wide default metrics (CPU, memory). Off in tests that run many gateways. */
  defaultMetrics?: boolean;
  /** The random source and the sleep of the waits between a request's attempts (default: the real ones). */
  retryTiming?: RetryTiming;
}

/** Longest a closing gateway waits for its background responses to store how they ended. */
const BACKGROUND_SETTLE_MS = 2_000;

/** The composition root: builds every part of a gateway from its configuration and runs it. */
export class Gateway {
  readonly app: FastifyInstance;
  readonly context: GatewayContext;
  private readonly lifecycle = { draining: false };
  private discovery: KubernetesDiscovery | undefined;
  private readonly lease: ReplicaLease | undefined;
  private readonly orphans: OrphanSweeper | undefined;
  /** Reads the workers' engine metrics (`Worker.signals()`). */
  readonly signals: SignalScraper;
  /** Requests waiting while every worker of a scorer-routed model is saturated (off: undefined). */
  readonly flow: FlowControl | undefined;
  /** What replicas share of routing through Redis (the scorer's affinity, worker loads, flow control's counts). */
  readonly sharing: ReplicaSharing;
  /** What all requests together hold of answers being built (`limits.maxHeldBytes`). */
  readonly held: HeldBytes;
  /** One full collection after a burst, once the requests hold little again (issue 48). */
  private readonly idleCollection: IdleCollection;
  private closed = false;

  constructor(
    readonly config: SluiceConfig,
    options: GatewayOptions = {},
  ) {
    const log = options.logger ?? createLogger(config.log.level, undefined, config.log.format);
    const metrics = new GatewayMetrics(options.defaultMetrics ?? true);
    const settings = new ModelSettings(config);
    const router = new Router(config, settings);
    const registry = new WorkerRegistry(config, {
      onRemoved: (worker) => {
        router.removeWorker(worker.id);
        metrics.decisions.forget(worker.id);
      },
      onModelGone: (model) => router.forgetModel(model),
      onCircuitChange: (worker, state, model) => {
        const label = model === undefined ? '' : metrics.modelLabel(model);
        metrics.circuitTransitions.inc({ worker: worker.id, model: label, state });
        log.warn(
          { worker: worker.id, model: model === undefined ? undefined : label, state },
          'circuit state changed',
        );
      },
      onEjectionRefused: (worker, model) => {
        const label = metrics.modelLabel(model);
        metrics.ejectionsRefused.inc({ worker: worker.id, model: label });
        log.warn(
          { worker: worker.id, model: label, maxEjectionPercent: config.breaker.maxEjectionPercent },
          'circuit kept closed: the model already has its maximum share of workers ejected',
        );
      },
    });
    metrics.bindModels((model) => registry.knowsModel(model));
    metrics.bindWorkers(() => registry.list().map((w) => w.snapshot()));
    const health = new HealthChecker(registry, config.health, log);
    this.signals = new SignalScraper(registry, config.signals, log, (worker, cause) =>
      metrics.signalScrapeFailures.inc({ worker: worker.id, cause }),
    );
    const requests = new RequestRegistry();
    this.held = new HeldBytes(config.limits.maxHeldBytes ?? defaultHeldBudget());
    metrics.bindHeld(this.held);
    const held = this.held;
    this.idleCollection = new IdleCollection({
      quiet: () => held.inUse <= held.capacity / 16,
      idle: () => requests.size === 0,
      onCollected: (before, after) =>
        log.info(
          { heapUsedBeforeMb: Math.round(before / 2 ** 20), heapUsedAfterMb: Math.round(after / 2 ** 20) },
          'collected the garbage of a burst',
        ),
    });
    this.flow = config.flow.enabled
      ? new FlowControl(
          {
            classes: config.flow.classes,
            defaultPriority: config.flow.classes.indexOf(config.flow.defaultClass),
            maxWaitMs: config.flow.maxWaitMs,
            maxQueued: config.flow.maxQueued,
            pollMs: config.flow.pollMs,
            heavyShare: config.flow.heavyShare,
          },
          metrics,
        )
      : undefined;
    const dispatcher = new Dispatcher(
      config,
      settings,
      registry,
      router,
      requests,
      health,
      metrics,
      log,
      this.flow,
      this.held,
      options.retryTiming,
    );
    this.sharing = new ReplicaSharing(
      config,
      router.affinity,
      registry,
      this.flow,
      log,
      (channel, cause, n) => metrics.replicaShareFailures.inc({ channel, cause }, n),
    );
    const store = openStore(config, (operation) =>
      metrics.storeRetries.inc({ backend: 'postgres', operation }),
    );
    this.lease = store && new ReplicaLease(store, config.responses, log);
    this.orphans =
      store && this.lease && new OrphanSweeper(store, config.responses.sweepIntervalMs, log, this.lease);
    this.context = {
      config,
      log,
      metrics,
      registry,
      health,
      router,
      dispatcher,
      requests,
      lifecycle: this.lifecycle,
      store,
      access: new AccessControl(config, store, log),
      responses: new ResponsesService(dispatcher, store, log, {
        replicaId: this.lease?.id,
        orphans: this.orphans,
        mcp: new McpTools(config.mcp, log),
        pdf: new PdfReader(config.files.pdf, metrics, log),
        maxRunBytes: config.limits.maxBodyBytes,
        held: this.held,
        onWriteFailed: (backend, code) => metrics.storeWriteFailures.inc({ backend, code }),
        onBackgroundEnded: (model, end) => countRunEnd(metrics, 'responses', model, end.error),
      }),
      conversations: new ConversationsService(store),
      sharing: this.sharing,
      tracing: Tracing.fromConfig(config, log),
    };
    this.app = buildServer(this.context);
  }

  get log(): Logger {
    return this.context.log;
  }

  /** Registers the configured workers, checks them once, then listens. */
  async start(): Promise<string> {
    await this.context.store?.migrate();
    await this.lease?.start();
    // Background responses left unfinished by processes that stopped are ended now, then periodically.
    this.orphans?.start();
    await this.context.access.start();
    await this.sharing.start();
    for (const worker of this.config.workers) this.context.registry.add(worker, 'static');
    await this.startDiscovery();
    await this.context.health.checkAll();
    this.context.health.start();
    // A first reading of every engine (each read bounded by signals.timeoutMs), then one per interval.
    await this.signals.tick();
    this.signals.start();
    this.idleCollection.start();
    await this.app.listen({ host: this.config.server.host, port: this.config.server.port });
    const url = this.url;
    this.log.info(
      {
        url,
        workers: this.context.registry
          .list()
          .map((w) => ({ id: w.id, healthy: w.healthy, models: [...w.models] })),
      },
      'sluice gateway listening',
    );
    return url;
  }

  /** Workers from the Kubernetes API, added and removed as their pods come and go. */
  private async startDiscovery(): Promise<void> {
    const options = this.config.discovery.kubernetes;
    if (!options) return;
    const { registry, health, log } = this.context;
    this.discovery = new KubernetesDiscovery({ ...options, logger: log });
    await this.discovery.start({
      onAdd: (found) => {
        if (registry.get(found.id)) return;
        const worker = registry.add({ url: found.url, id: found.id }, 'discovery');
        log.info({ worker: worker.id, url: found.url, pod: found.pod }, 'worker discovered');
        void health.check(worker);
      },
      onRemove: (id) => {
        if (!registry.get(id)) return;
        registry.remove(id);
        log.info({ worker: id }, 'worker gone from discovery');
      },
    });
  }

  get url(): string {
    const address = this.app.server.address() as AddressInfo | null;
    if (!address) throw new Error('the gateway is not listening');
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    return `http://${host}:${address.port}`;
  }

  /**
   * Graceful shutdown: stop accepting, let streams in flight finish for up to `graceMs`, then
   * end the rest with the terminal DispatcherClosed error, and close.
   */
  async shutdown(graceMs = this.config.server.shutdownGraceMs): Promise<void> {
    if (this.closed) return;
    this.lifecycle.draining = true;
    this.log.info({ inflight: this.context.requests.size, graceMs }, 'shutting down: draining requests');
    const listening = new Promise<void>((resolve) => this.app.server.close(() => resolve()));
    const until = Date.now() + graceMs;
    while (this.context.requests.size > 0 && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    if (this.context.requests.size > 0) {
      this.log.warn({ inflight: this.context.requests.size }, 'grace period over: ending open streams');
      this.context.requests.closeAll(new DispatcherClosed());
      // Let the terminal frames flush before the sockets close.
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    this.app.server.closeAllConnections();
    await listening;
    await this.close();
  }

  /** Closes at once (tests, or after `shutdown`). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.lifecycle.draining = true;
    this.context.health.stop();
    this.signals.stop();
    this.idleCollection.stop();
    this.flow?.close(new GatewayShuttingDown());
    await this.sharing.stop();
    await this.discovery?.stop();
    if (this.context.requests.size > 0) {
      this.context.requests.closeAll(
        new ClientClosed('The gateway closed its engine clients; the stream was ended.'),
      );
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await this.app.close();
    await this.context.registry.closeAll();
    // The background runs just ended store their end before the lease (and the store) goes.
    await this.context.responses.settle(BACKGROUND_SETTLE_MS);
    await this.orphans?.stop();
    await this.lease?.stop();
    await this.context.access.close();
    this.context.responses.close();
    await this.context.store?.close();
    // Last: the spans of the requests just ended are exported before the process goes.
    await this.context.tracing?.shutdown();
  }
}

/** The configured store, not yet migrated; undefined with `storage.kind: none`. */
export function openStore(
  config: SluiceConfig,
  onRetry?: (operation: string) => void,
): (Store & KeyStore) | undefined {
  const { storage } = config;
  if (storage.kind === 'none') return undefined;
  if (storage.kind === 'postgres')
    return createStore({
      kind: 'postgres',
      url: storage.url!,
      schema: storage.schema,
      writeRetryMs: storage.writeRetryMs,
      onRetry,
    });
  const path = storage.path ?? join(config.dataDir, 'sluice.db');
  return createStore({ kind: 'sqlite', path, busyTimeoutMs: storage.busyTimeoutMs });
}
