/**
 * The routing benchmark's fleet: `count` mock workers with the engine model in this one process
 * (one event loop for all, so that the engines cost the shared machine little), each serving
 * every model name given. Run as `node --import tsx bench/routing-fleet.ts '<json>'` with
 * `{"count": 8, "models": [...], "engine": {...}}`; prints one JSON line with the engines' URLs.
 */
import { createMockWorker, type EngineOptions, type MockWorker } from '../src/mock/mock-worker.js';

export interface FleetSpec {
  count: number;
  models: string[];
  engine: EngineOptions;
}

const spec = JSON.parse(process.argv[2] ?? '{}') as FleetSpec;
const workers: MockWorker[] = [];
for (let i = 0; i < spec.count; i++) {
  // Each engine its own seed, so that jitter (if any) differs between engines but not between runs.
  workers.push(
    await createMockWorker({
      models: spec.models,
      engine: { ...spec.engine, seed: (spec.engine.seed ?? 0) + i },
    }),
  );
}
console.log(
  JSON.stringify({ msg: 'fleet listening', url: workers[0]!.url, urls: workers.map((w) => w.url) }),
);

const stop = () => {
  void Promise.all(workers.map((w) => w.close())).then(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
