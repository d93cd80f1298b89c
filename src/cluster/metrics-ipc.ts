import cluster from 'node:cluster';
import { AggregatorRegistry, type Registry } from 'prom-client';

/**
 * One scrape for the whole cluster. prom-client's AggregatorRegistry gathers and merges every
 * process's metrics, but only the primary can ask for them, and a scrape reaches whichever
 * process the primary handed the connection to: these two messages let that process ask the
 * primary (written here because prom-client has no such request path).
 */
const SCRAPE_REQUEST = 'sluice:scrape-request';
const SCRAPE_RESPONSE = 'sluice:scrape-response';
const SCRAPE_TIMEOUT_MS = 6_000;

interface ScrapeRequest {
  type: typeof SCRAPE_REQUEST;
  id: number;
}

interface ScrapeResponse {
  type: typeof SCRAPE_RESPONSE;
  id: number;
  text?: string;
  error?: string;
}

function isMessage<T extends { type: string }>(message: unknown, type: T['type']): message is T {
  return typeof message === 'object' && message !== null && (message as { type?: unknown }).type === type;
}

/** In the primary: answers the processes' scrape requests with the metrics of all of them. */
export function serveClusterScrapes(): void {
  const aggregator = new AggregatorRegistry();
  cluster.on('message', (worker, message: unknown) => {
    if (!isMessage<ScrapeRequest>(message, SCRAPE_REQUEST)) return;
    const reply = (answer: Omit<ScrapeResponse, 'type' | 'id'>) => {
      if (worker.isConnected()) worker.send({ type: SCRAPE_RESPONSE, id: message.id, ...answer });
    };
    aggregator.clusterMetrics().then(
      (text) => reply({ text }),
      (err: Error) => reply({ error: err.message }),
    );
  });
}

/** In a cluster process: serves its registry to the primary, and scrapes the whole cluster. */
export class ClusterScrapeClient {
  private nextId = 0;
  private readonly pending = new Map<
    number,
    { resolve: (text: string) => void; reject: (err: Error) => void; timer: NodeJS.Timeout }
  >();

  constructor(registry: Registry) {
    AggregatorRegistry.setRegistries([registry]);
    // Constructing one installs prom-client's listener that answers the primary's requests.
    new AggregatorRegistry();
    process.on('message', (message: unknown) => {
      if (!isMessage<ScrapeResponse>(message, SCRAPE_RESPONSE)) return;
      const waiting = this.pending.get(message.id);
      if (!waiting) return;
      this.pending.delete(message.id);
      clearTimeout(waiting.timer);
      if (message.text !== undefined) waiting.resolve(message.text);
      else waiting.reject(new Error(`cluster scrape failed: ${message.error ?? 'no answer'}`));
    });
  }

  readonly scrape = (): Promise<string> =>
    new Promise((resolve, reject) => {
      const id = this.nextId++;
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error('cluster scrape timed out'));
      }, SCRAPE_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, timer });
      process.send?.({ type: SCRAPE_REQUEST, id } satisfies ScrapeRequest);
    });
}
