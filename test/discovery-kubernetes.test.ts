import { createHook } from 'node:async_hooks';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import type { Logger } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { Backoff, sleep } from '../src/discovery/backoff.js';
import {
  type DiscoveredWorker,
  type DiscoveryLogger,
  KubernetesDiscovery,
  type KubernetesDiscoveryOptions,
} from '../src/discovery/kubernetes.js';
import { ndjsonLines } from '../src/discovery/ndjson.js';
import { evaluatePod, podSchema } from '../src/discovery/pod.js';

// A pino Logger must fit where discovery takes a logger.
const pinoFits: (logger: Logger) => DiscoveryLogger = (logger) => logger;
void pinoFits;

import { FakeApi, type Json, NS, pod, TOKEN } from './helpers/fake-kube-api.js';

interface Logged {
  level: 'info' | 'warn' | 'error';
  obj: object;
  msg: string | undefined;
}

interface Harness {
  api: FakeApi;
  discovery: KubernetesDiscovery;
  events: string[];
  logs: Logged[];
  start(): Promise<void>;
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function harness(
  options: Partial<KubernetesDiscoveryOptions> = {},
  pods: Json[] = [],
): Promise<Harness> {
  const api = new FakeApi();
  api.pods = pods;
  await api.listen();
  const events: string[] = [];
  const logs: Logged[] = [];
  const logger: DiscoveryLogger = {
    info: (obj, msg) => logs.push({ level: 'info', obj, msg }),
    warn: (obj, msg) => logs.push({ level: 'warn', obj, msg }),
    error: (obj, msg) => logs.push({ level: 'error', obj, msg }),
  };
  const discovery = new KubernetesDiscovery({
    apiServer: api.url,
    namespace: NS,
    labelSelector: 'app=vllm',
    token: TOKEN,
    backoffInitialMs: 10,
    backoffMaxMs: 40,
    resyncMs: 0,
    logger,
    ...options,
  });
  cleanups.push(async () => {
    await discovery.stop();
    await api.close();
  });
  const handlers = {
    onAdd: (w: DiscoveredWorker) => events.push(`add ${w.id} ${w.url} ${w.pod}`),
    onRemove: (id: string) => events.push(`remove ${id}`),
  };
  return { api, discovery, events, logs, start: () => discovery.start(handlers) };
}

const waitFor = <T>(check: () => T) => vi.waitFor(check, { timeout: 3000, interval: 5 });

describe('KubernetesDiscovery: the initial LIST', () => {
  it('delivers only running, ready pods with an IP that are not terminating, before start resolves', async () => {
    const h = await harness({ defaultPort: 9000 }, [
      pod('a', { ip: '10.0.0.1' }),
      pod('pending', { ip: '10.0.0.2', phase: 'Pending' }),
      pod('unready', { ip: '10.0.0.3', ready: false }),
      pod('no-ip', { ip: null }),
      pod('terminating', { ip: '10.0.0.5', deleting: true }),
      pod('succeeded', { ip: '10.0.0.6', phase: 'Succeeded' }),
      pod('default-port', { ip: '10.0.0.7', port: null }),
      pod('bad-port', { ip: '10.0.0.8', port: 'http' }),
    ]);
    await h.start();
    expect(h.events).toEqual([
      `add ml/a http://10.0.0.1:8000 a`,
      `add ml/default-port http://10.0.0.7:9000 default-port`,
    ]);
    expect(h.discovery.workers().map((w) => w.id)).toEqual(['ml/a', 'ml/default-port']);
    const warnings = h.logs.filter((l) => l.level === 'warn');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.obj).toMatchObject({ pod: 'ml/bad-port' });

    const list = h.api.requests[0]!;
    expect(list.kind).toBe('list');
    expect(list.path).toBe('/api/v1/namespaces/ml/pods');
    expect(list.query.get('labelSelector')).toBe('app=vllm');
    expect(list.authorization).toBe(`Bearer ${TOKEN}`);

    const watch = await h.api.watch(0);
    expect(watch.query.get('resourceVersion')).toBe('100');
    expect(watch.query.get('allowWatchBookmarks')).toBe('true');
    expect(watch.query.get('labelSelector')).toBe('app=vllm');
  });

  it('skips pods without the port annotation when there is no default port, and uses https when asked', async () => {
    const h = await harness({ scheme: 'https' }, [pod('a', { ip: 'fd00::5' }), pod('b', { port: null })]);
    await h.start();
    expect(h.events).toEqual(['add ml/a https://[fd00::5]:8000 a']);
  });

  it('follows LIST pages through continue tokens', async () => {
    const pods = ['p1', 'p2', 'p3', 'p4', 'p5'].map((name, i) => pod(name, { ip: `10.0.1.${i + 1}` }));
    const h = await harness({ pageSize: 2 }, pods);
    await h.start();
    expect(h.events).toHaveLength(5);
    const lists = h.api.requests.filter((r) => r.kind === 'list');
    expect(lists.map((r) => r.query.get('continue'))).toEqual([null, '2', '4']);
    expect(lists.every((r) => r.query.get('limit') === '2')).toBe(true);
  });

  it('rejects start when the first LIST fails, and makes no further request', async () => {
    const h = await harness();
    h.api.listFailures.push(403);
    await expect(h.start()).rejects.toThrow(/403/);
    await sleep(100, new AbortController().signal);
    expect(h.api.requests).toHaveLength(1);
  });

  it('rejects start when a configured token or CA file cannot be read', async () => {
    const missing = join(tmpdir(), 'sluice-k8s-missing', 'nothing');
    const noToken = await harness({ token: undefined, tokenFile: missing });
    await expect(noToken.start()).rejects.toThrow(/token file/);
    expect(noToken.api.requests).toHaveLength(0);
    const noCa = await harness({ apiServer: 'https://127.0.0.1:1', caFile: missing });
    await expect(noCa.start()).rejects.toThrow(/CA file/);
  });

  it('sends the token file, re-read on every reconnect', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-k8s-'));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, 'token-one\n');
    const h = await harness({ token: undefined, tokenFile });
    h.api.token = 'token-one';
    await h.start();
    const first = await h.api.watch(0);
    writeFileSync(tokenFile, 'token-two\n');
    h.api.token = 'token-two';
    first.end();
    await h.api.watch(1);
    expect(h.api.requests.map((r) => r.authorization)).toEqual([
      'Bearer token-one',
      'Bearer token-one',
      'Bearer token-two',
    ]);
  });
});

describe('KubernetesDiscovery: the WATCH', () => {
  it('adds, re-adds on URL change, and removes as pods change', async () => {
    const h = await harness({}, [
      pod('a', { ip: '10.0.0.1' }),
      pod('c', { ip: '10.0.0.3', phase: 'Pending' }),
    ]);
    await h.start();
    const w = await h.api.watch(0);
    const expected = ['add ml/a http://10.0.0.1:8000 a'];
    const step = async (type: string, object: Json, ...more: string[]) => {
      w.send(type, object);
      expected.push(...more);
      await waitFor(() => expect(h.events).toEqual(expected));
    };

    await step('ADDED', pod('b', { ip: '10.0.0.2', rv: '101' }), 'add ml/b http://10.0.0.2:8000 b');
    await step('MODIFIED', pod('c', { ip: '10.0.0.3', rv: '102' }), 'add ml/c http://10.0.0.3:8000 c');
    await step(
      'MODIFIED',
      pod('c', { ip: '10.0.0.9', rv: '103' }),
      'remove ml/c',
      'add ml/c http://10.0.0.9:8000 c',
    );
    await step(
      'MODIFIED',
      pod('c', { ip: '10.0.0.9', port: '8001', rv: '104' }),
      'remove ml/c',
      'add ml/c http://10.0.0.9:8001 c',
    );
    // Nothing that matters changed: no event (the next step proves it was read).
    w.send('MODIFIED', pod('c', { ip: '10.0.0.9', port: '8001', rv: '105' }));
    await step('MODIFIED', pod('b', { ip: '10.0.0.2', ready: false, rv: '106' }), 'remove ml/b');
    await step('MODIFIED', pod('b', { ip: '10.0.0.2', rv: '107' }), 'add ml/b http://10.0.0.2:8000 b');
    await step('MODIFIED', pod('b', { ip: '10.0.0.2', deleting: true, rv: '108' }), 'remove ml/b');
    // Deleting a pod that is no longer a worker, or one never seen, emits nothing.
    w.send('DELETED', pod('b', { ip: '10.0.0.2', deleting: true, rv: '109' }));
    w.send('DELETED', pod('never-seen', { rv: '110' }));
    await step('DELETED', pod('a', { ip: '10.0.0.1', rv: '111' }), 'remove ml/a');
    w.send('ADDED', pod('bad', { port: '70000', rv: '112' }));
    await step('MODIFIED', pod('c', { ip: '10.0.0.9', phase: 'Failed', rv: '113' }), 'remove ml/c');

    expect(h.discovery.workers()).toEqual([]);
    expect(h.logs.filter((l) => l.level === 'warn').map((l) => l.obj)).toEqual([
      expect.objectContaining({ pod: 'ml/bad' }),
    ]);
    expect(h.api.count('list')).toBe(1);
    expect(h.api.count('watch')).toBe(1);
  });

  it('keeps going when a handler throws', async () => {
    const h = await harness({}, []);
    let calls = 0;
    await h.discovery.start({
      onAdd: (w) => {
        calls++;
        if (w.pod === 'a') throw new Error('boom');
        h.events.push(`add ${w.id}`);
      },
      onRemove: () => {},
    });
    const w = await h.api.watch(0);
    w.send('ADDED', pod('a', { rv: '101' }));
    w.send('ADDED', pod('b', { ip: '10.0.0.2', rv: '102' }));
    await waitFor(() => expect(h.events).toEqual(['add ml/b']));
    expect(calls).toBe(2);
    expect(h.logs.some((l) => l.level === 'error' && l.msg?.includes('onAdd'))).toBe(true);
  });

  it('resumes a watch that ends from the last resourceVersion: of an event, then of a BOOKMARK', async () => {
    const h = await harness({}, [pod('a')]);
    await h.start();
    const w0 = await h.api.watch(0);
    // Event-driven: the discovery has taken in the event (its resourceVersion) before the watch ends.
    const seenVersion = () => (h.discovery as unknown as { resourceVersion?: string }).resourceVersion;
    w0.send('MODIFIED', pod('a', { rv: '205' }));
    await waitFor(() => expect(seenVersion()).toBe('205'));
    w0.end();
    const w1 = await h.api.watch(1);
    expect(w1.query.get('resourceVersion')).toBe('205');
    w1.bookmark('300');
    await waitFor(() => expect(seenVersion()).toBe('300'));
    w1.end();
    const w2 = await h.api.watch(2);
    expect(w2.query.get('resourceVersion')).toBe('300');
    expect(h.api.count('list')).toBe(1);
    expect(h.events).toEqual(['add ml/a http://10.0.0.1:8000 a']);
  });

  it('resumes after a failed WATCH (HTTP 500, ERROR 500, a line that is not JSON) without listing', async () => {
    const h = await harness({}, [pod('a')]);
    await h.start();
    const w0 = await h.api.watch(0);
    w0.bookmark('150');
    w0.error(500, 'InternalError');
    const w1 = await h.api.watch(1);
    expect(w1.query.get('resourceVersion')).toBe('150');
    h.api.watchFailures.push(500);
    w1.raw('{"type": "ADDED", "obj\n');
    await h.api.watch(2);
    expect(h.api.count('watch')).toBe(4); // the 500 answer in between
    expect(
      h.api.requests.filter((r) => r.kind === 'watch').map((r) => r.query.get('resourceVersion')),
    ).toEqual(['100', '150', '150', '150']);
    expect(h.api.count('list')).toBe(1);
    expect(h.logs.filter((l) => l.level === 'warn' && l.msg?.includes('watch failed'))).toHaveLength(3);
  });

  it('lists again and applies the differences on HTTP 410, and on an ERROR event with code 410', async () => {
    const h = await harness({}, [pod('a', { ip: '10.0.0.1' }), pod('c', { ip: '10.0.0.3' })]);
    await h.start();
    const w0 = await h.api.watch(0);
    h.api.pods = [pod('c', { ip: '10.0.0.33' }), pod('b', { ip: '10.0.0.2' })];
    h.api.listRv = '500';
    h.api.watchFailures.push(410);
    w0.end();
    const w1 = await h.api.watch(1);
    expect(h.api.count('list')).toBe(2);
    expect(w1.query.get('resourceVersion')).toBe('500');
    expect(h.events.slice(2)).toEqual([
      'remove ml/a',
      'remove ml/c',
      'add ml/c http://10.0.0.33:8000 c',
      'add ml/b http://10.0.0.2:8000 b',
    ]);

    h.api.pods = [pod('b', { ip: '10.0.0.2' }), pod('d', { ip: '10.0.0.4' })];
    h.api.listRv = '600';
    w1.error(410, 'Expired');
    const w2 = await h.api.watch(2);
    expect(h.api.count('list')).toBe(3);
    expect(w2.query.get('resourceVersion')).toBe('600');
    expect(h.events.slice(6)).toEqual(['remove ml/c', 'add ml/d http://10.0.0.4:8000 d']);
    expect(h.discovery.workers().map((w) => w.id)).toEqual(['ml/b', 'ml/d']);
  });

  it('retries a failing re-LIST with backoff until it succeeds', async () => {
    const h = await harness({}, [pod('a')]);
    await h.start();
    const w0 = await h.api.watch(0);
    h.api.listFailures.push(500, 503);
    h.api.pods = [];
    w0.error(410, 'Expired');
    await h.api.watch(1);
    expect(h.api.count('list')).toBe(4);
    expect(h.events).toEqual(['add ml/a http://10.0.0.1:8000 a', 'remove ml/a']);
  });

  it('lists again every resyncMs, ending the open watch', async () => {
    const h = await harness({ resyncMs: 150 }, [pod('a')]);
    await h.start();
    const w0 = await h.api.watch(0);
    h.api.pods = [pod('a'), pod('b', { ip: '10.0.0.2' })];
    h.api.listRv = '700';
    const w1 = await h.api.watch(1);
    expect(w0.closed).toBe(true);
    expect(h.api.count('list')).toBe(2);
    expect(w1.query.get('resourceVersion')).toBe('700');
    expect(h.events).toEqual(['add ml/a http://10.0.0.1:8000 a', 'add ml/b http://10.0.0.2:8000 b']);
  });
});

describe('KubernetesDiscovery: stop', () => {
  /** Counts the referenced timers created since it began and not yet cleared or run. */
  function trackTimers() {
    const live = new Map<number, NodeJS.Timeout>();
    const hook = createHook({
      init(id, type, _trigger, resource) {
        if (type === 'Timeout') live.set(id, resource as NodeJS.Timeout);
      },
      destroy(id) {
        live.delete(id);
      },
    }).enable();
    cleanups.push(async () => {
      hook.disable();
    });
    // Destroy hooks run after the current callback: let them.
    return async () => {
      await new Promise((resolve) => setImmediate(resolve));
      return [...live.values()].filter((timer) => timer.hasRef()).length;
    };
  }

  it('ends the open watch; no request, event or timer after it resolves', async () => {
    const timers = trackTimers();
    const h = await harness({ resyncMs: 60_000 }, [pod('a')]);
    await h.start();
    const w = await h.api.watch(0);
    await h.discovery.stop();
    await waitFor(() => expect(w.closed).toBe(true));
    const seen = h.api.requests.length;
    w.send('ADDED', pod('b', { ip: '10.0.0.2', rv: '101' }));
    await sleep(100, new AbortController().signal);
    expect(h.api.requests.length).toBe(seen);
    expect(h.events).toEqual(['add ml/a http://10.0.0.1:8000 a']);
    expect(await timers()).toBe(0);
  });

  it('cuts a backoff wait short, and a later start is refused', async () => {
    const timers = trackTimers();
    const h = await harness({ backoffInitialMs: 10_000, backoffMaxMs: 10_000 }, [pod('a')]);
    await h.start();
    const w = await h.api.watch(0);
    w.end();
    await waitFor(() => expect(h.logs.some((l) => l.msg?.includes('watch ended'))).toBe(true)); // waiting 10 s
    const began = Date.now();
    await h.discovery.stop();
    // The backoff had 10 s to go: generous for a loaded machine.
    expect(Date.now() - began).toBeLessThan(5_000);
    expect(await timers()).toBe(0);
    await expect(h.start()).rejects.toThrow(/once/);
    await sleep(50, new AbortController().signal);
    expect(h.api.count('watch')).toBe(1);
  });

  it('aborts a LIST in flight: start settles and stop resolves', async () => {
    const h = await harness();
    h.api.hangLists = true;
    const started = h.start();
    await waitFor(() => expect(h.api.count('list')).toBe(1));
    await h.discovery.stop();
    await expect(started).resolves.toBeUndefined();
    expect(h.events).toEqual([]);
  });
});

describe('discovery helpers', () => {
  it('splits newline-delimited JSON across chunks, multi-byte characters included', async () => {
    const bytes = new TextEncoder().encode('{"a":"é"}\n\n{"b":2}\n{"c":3}');
    async function* chunks() {
      for (let i = 0; i < bytes.length; i += 3) yield bytes.subarray(i, i + 3);
    }
    const lines: string[] = [];
    for await (const line of ndjsonLines(chunks())) lines.push(line);
    expect(lines).toEqual(['{"a":"é"}', '{"b":2}', '{"c":3}']);
  });

  it('refuses a line longer than the bound', async () => {
    async function* chunks() {
      for (let i = 0; i < 10; i++) yield new TextEncoder().encode('x'.repeat(10));
    }
    const read = async () => {
      for await (const _ of ndjsonLines(chunks(), 50)) {
        // drain
      }
    };
    await expect(read()).rejects.toThrow(/longer than 50/);
  });

  it('doubles the backoff up to its bound and resets it', () => {
    const backoff = new Backoff(500, 30_000);
    const delays = Array.from({ length: 9 }, () => backoff.next());
    expect(delays).toEqual([500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
    backoff.reset();
    expect(backoff.next()).toBe(500);
  });

  it('takes the port annotation only when it is a port', () => {
    const options = {
      namespace: NS,
      portAnnotation: 'sluice.io/port',
      defaultPort: 8000,
      scheme: 'http' as const,
    };
    const url = (port: string) => evaluatePod(podSchema.parse(pod('p', { port })), options).worker?.url;
    expect(url('8080')).toBe('http://10.0.0.1:8080');
    expect(url('0')).toBeUndefined();
    expect(url('65536')).toBeUndefined();
    expect(url('80x')).toBeUndefined();
  });
});

// ---------------------------------------------------------------------------------------------

const DEPLOY_DIR = join(import.meta.dirname, '..', 'deploy', 'kubernetes');

interface Manifest {
  file: string;
  kind: string;
  name: string;
  namespace: string | undefined;
  body: Json;
}

function yamlFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) return yamlFiles(path);
    return /\.ya?ml$/.test(entry) ? [path] : [];
  });
}

function loadManifests(): Manifest[] {
  return yamlFiles(DEPLOY_DIR).flatMap((path) => {
    const file = relative(DEPLOY_DIR, path);
    return parseAllDocuments(readFileSync(path, 'utf8')).map((doc) => {
      expect(doc.errors, file).toEqual([]);
      const body = doc.toJS() as Json;
      const metadata = body.metadata as { name?: string; namespace?: string };
      expect(typeof body.apiVersion, file).toBe('string');
      expect(typeof metadata.name, file).toBe('string');
      return { file, kind: String(body.kind), name: metadata.name!, namespace: metadata.namespace, body };
    });
  });
}

/** Reads a nested value; the test fails with the path when it is missing. */
function at<T = unknown>(value: unknown, ...path: Array<string | number>): T {
  let node = value;
  for (const key of path) {
    if (typeof node !== 'object' || node === null) throw new Error(`missing ${path.join('.')}`);
    node = (node as Record<string | number, unknown>)[key];
  }
  if (node === undefined) throw new Error(`missing ${path.join('.')}`);
  return node as T;
}

interface Container {
  name: string;
  env: Array<{ name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }>;
}

describe('deploy/kubernetes manifests', () => {
  const manifests = loadManifests();
  const find = (kind: string, name: string) => {
    const found = manifests.find((m) => m.kind === kind && m.name === name);
    if (!found) throw new Error(`no ${kind} ${name}`);
    return found;
  };

  it('parse, and every namespaced object is in the sluice namespace', () => {
    const kinds = manifests.map((m) => m.kind).sort();
    expect(kinds).toEqual(
      [
        'ConfigMap',
        'Deployment',
        'Deployment',
        'Namespace',
        'PodDisruptionBudget',
        'Role',
        'RoleBinding',
        'Service',
        'ServiceAccount',
      ].sort(),
    );
    for (const m of manifests.filter((m) => m.kind !== 'Namespace'))
      expect(m.namespace, m.file).toBe('sluice');
  });

  it('grant exactly get, list, watch on pods to the gateway service account', () => {
    const role = find('Role', 'sluice-pod-reader').body;
    expect(at(role, 'rules')).toEqual([
      { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
    ]);
    const binding = find('RoleBinding', 'sluice-pod-reader').body;
    expect(at(binding, 'roleRef')).toEqual({
      apiGroup: 'rbac.authorization.k8s.io',
      kind: 'Role',
      name: 'sluice-pod-reader',
    });
    expect(at(binding, 'subjects')).toEqual([
      { kind: 'ServiceAccount', name: 'sluice', namespace: 'sluice' },
    ]);
    find('ServiceAccount', 'sluice');
  });

  it('run the gateway as configured: probes, secrets, security, shutdown timing', () => {
    const deployment = find('Deployment', 'sluice').body;
    const pod = at(deployment, 'spec', 'template', 'spec');
    expect(at(deployment, 'spec', 'replicas')).toBe(2);
    expect(at(pod, 'serviceAccountName')).toBe('sluice');
    const container = at<Container>(pod, 'containers', 0);
    expect(at(container, 'image')).toBe('ghcr.io/example/sluice:latest');
    expect(at(container, 'args')).toEqual(['serve', '--config', '/etc/sluice/sluice.yaml']);
    expect(at(container, 'readinessProbe', 'httpGet', 'path')).toBe('/health/ready');
    expect(at(container, 'livenessProbe', 'httpGet', 'path')).toBe('/health');
    expect(at(container, 'resources', 'requests', 'memory')).toBeTypeOf('string');

    const fromSecret = Object.fromEntries(
      container.env
        .filter((e) => e.valueFrom?.secretKeyRef)
        .map((e) => [e.name, e.valueFrom?.secretKeyRef?.name]),
    );
    expect(fromSecret).toEqual({
      SLUICE_POSTGRES_URL: 'sluice-secrets',
      SLUICE_REDIS_URL: 'sluice-secrets',
      SLUICE_ADMIN_KEY: 'sluice-secrets',
    });

    expect(at(pod, 'securityContext', 'runAsNonRoot')).toBe(true);
    expect(at(container, 'securityContext', 'readOnlyRootFilesystem')).toBe(true);
    expect(at(container, 'securityContext', 'allowPrivilegeEscalation')).toBe(false);

    // The config file comes from the ConfigMap, and its drain fits in the grace period.
    const mount = at<Array<{ name: string; mountPath: string }>>(container, 'volumeMounts').find(
      (m) => m.mountPath === '/etc/sluice',
    );
    const volume = at<Array<{ name: string; configMap?: { name: string } }>>(pod, 'volumes').find(
      (v) => v.name === mount?.name,
    );
    expect(volume?.configMap?.name).toBe('sluice-config');
    const config = parseYaml(at<string>(find('ConfigMap', 'sluice-config').body, 'data', 'sluice.yaml'));
    const preStopSeconds = at<number>(container, 'lifecycle', 'preStop', 'sleep', 'seconds');
    const drainSeconds = at<number>(config, 'server', 'shutdownGraceMs') / 1000;
    expect(at<number>(pod, 'terminationGracePeriodSeconds')).toBeGreaterThan(preStopSeconds + drainSeconds);

    // The Service and the PodDisruptionBudget select the gateway's pods.
    const labels = at<Json>(deployment, 'spec', 'template', 'metadata', 'labels');
    expect(at(deployment, 'spec', 'selector', 'matchLabels')).toEqual(labels);
    expect(at(find('Service', 'sluice').body, 'spec', 'selector')).toEqual(labels);
    expect(at(find('PodDisruptionBudget', 'sluice').body, 'spec', 'selector', 'matchLabels')).toEqual(labels);
    expect(at(find('Service', 'sluice').body, 'spec', 'ports', 0, 'targetPort')).toBe('http');
  });

  it('configure postgres, redis and a discovery that finds the example vLLM pods', () => {
    const config = parseYaml(at<string>(find('ConfigMap', 'sluice-config').body, 'data', 'sluice.yaml'));
    expect(at(config, 'storage', 'kind')).toBe('postgres');
    expect(at(config, 'redis')).toBeTypeOf('object');
    expect(at(config, 'server', 'host')).toBe('0.0.0.0');
    const discovery = at<Json>(config, 'discovery', 'kubernetes');
    expect(discovery).toMatchObject({
      namespace: 'sluice',
      labelSelector: 'app=vllm',
      portAnnotation: 'sluice.io/port',
    });

    const vllm = find('Deployment', 'vllm');
    expect(vllm.file).toBe(join('examples', 'vllm.yaml'));
    const template = at(vllm.body, 'spec', 'template');
    const [key, value] = String(discovery.labelSelector).split('=');
    expect(at(template, 'metadata', 'labels', key!)).toBe(value);
    const port = at(template, 'metadata', 'annotations', String(discovery.portAnnotation));
    expect(port).toBe('8000');
    expect(at(template, 'spec', 'containers', 0, 'ports', 0, 'containerPort')).toBe(Number(port));
    expect(at(template, 'spec', 'containers', 0, 'readinessProbe', 'httpGet', 'path')).toBe('/health');
  });
});
