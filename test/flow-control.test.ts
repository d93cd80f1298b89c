import { describe, expect, it } from 'vitest';
import { ClientDisconnected, FleetSaturated, GatewayShuttingDown } from '../src/errors/http-errors.js';
import { FlowControl, type FlowPeers, type FlowTicket } from '../src/flow/flow-control.js';
import { GatewayMetrics } from '../src/observability/metrics.js';

const CLASSES = ['high', 'normal', 'low'];

function flow(
  options: Partial<FlowControl['options']> = {},
  peers?: FlowPeers,
  now?: () => number,
): FlowControl {
  return new FlowControl(
    {
      classes: CLASSES,
      defaultPriority: 1,
      maxWaitMs: 10_000,
      maxQueued: 100,
      pollMs: 5,
      heavyShare: 4,
      ...options,
    },
    new GatewayMetrics(false),
    peers,
    now,
  );
}

const ticket = (tenant: string, klass = 'normal', maxWaitMs = 10_000): FlowTicket => ({
  tenant,
  priority: CLASSES.indexOf(klass),
  maxWaitMs,
});

/** A fleet that is saturated until opened, then takes one request at a time. */
class Fleet {
  open = false;
  busy = false;
  saturated = () => !this.open || this.busy;
}

/** Flow control with heavyShare 2 beside other replicas whose requests in flight by tenant the test sets (`remote`). */
function withRemoteTenants() {
  const remote = new Map<string, number>();
  const peers: FlowPeers = {
    inflight: (_m, tenant) => remote.get(tenant) ?? 0,
    highestWaiting: () => undefined,
    inflightByTenant: () => remote,
  };
  const control = flow({ heavyShare: 2 }, peers);
  const started = (tenant: string, n: number) => {
    for (let i = 0; i < n; i++) control.started('m', tenant);
  };
  return { control, started, remote };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

/** Turns of the event loop until `check` holds (at most 1,000: a test that waits for ever fails). */
async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 1_000 && !check(); i++) await turn();
  expect(check()).toBe(true);
}

/**
 * Opens the fleet and lets `n` requests go one at a time, each step driven by events, not
 * sleeps: once one has gone (`order` grew) and taken the one slot, the slot is freed and the
 * queue woken, as a request's end does (FlowControl.started's end).
 */
async function stepThrough(control: FlowControl, fleet: Fleet, order: readonly string[], n: number) {
  const wake = () => control.started('m', '')();
  fleet.open = true;
  wake();
  for (let i = 0; i < n; i++) {
    await until(() => order.length === i + 1);
    fleet.busy = false;
    wake();
  }
}

describe('flow control', () => {
  it('lets a request through at once when the fleet has room and nobody waits', () => {
    const control = flow();
    expect(control.enter('m', ticket('a'), new AbortController().signal, () => false)).toBeUndefined();
  });

  it('lets the waiting go by class, highest first, and in order of arrival within a tenant', async () => {
    const control = flow();
    const fleet = new Fleet();
    const order: string[] = [];
    const signal = new AbortController().signal;
    const send = (name: string, t: FlowTicket) =>
      control.enter('m', t, signal, fleet.saturated)!.then(() => {
        order.push(name);
        // It holds the fleet until the test lets it finish.
        fleet.busy = true;
      });
    const all = [
      send('low-1', ticket('x', 'low')),
      send('normal-1', ticket('x', 'normal')),
      send('high-1', ticket('x', 'high')),
      send('low-2', ticket('x', 'low')),
      send('high-2', ticket('x', 'high')),
      send('normal-2', ticket('x', 'normal')),
    ];
    await turn();
    expect(control.waiting('m')).toBe(6);
    await stepThrough(control, fleet, order, 6);
    await Promise.all(all);
    expect(order).toEqual(['high-1', 'high-2', 'normal-1', 'normal-2', 'low-1', 'low-2']);
  });

  it('is fair between tenants of a class: fewest in flight first, then taking turns', async () => {
    const control = flow();
    const fleet = new Fleet();
    const order: string[] = [];
    const signal = new AbortController().signal;
    // The hot tenant already has two requests in flight.
    const endHot = [control.started('m', 'hot'), control.started('m', 'hot')];
    const send = (t: FlowTicket) =>
      control.enter('m', t, signal, fleet.saturated)!.then(() => {
        order.push(t.tenant);
        fleet.busy = true;
      });
    const all = [
      ...Array.from({ length: 4 }, () => send(ticket('hot'))),
      send(ticket('a')),
      send(ticket('a')),
      send(ticket('b')),
    ];
    await turn();
    await stepThrough(control, fleet, order, 7);
    await Promise.all(all);
    // a and b (none in flight) take turns before hot (two in flight), which arrived first.
    expect(order).toEqual(['a', 'b', 'a', 'hot', 'hot', 'hot', 'hot']);
    for (const end of endHot) end();
  });

  it('takes turns between tenants with as many in flight, whoever arrived first', async () => {
    const control = flow();
    const fleet = new Fleet();
    const order: string[] = [];
    const send = (t: FlowTicket) =>
      control.enter('m', t, new AbortController().signal, fleet.saturated)!.then(() => {
        order.push(t.tenant);
        fleet.busy = true;
      });
    const all = [...['x', 'x', 'x', 'y', 'y', 'z'].map((tenant) => send(ticket(tenant)))];
    await turn();
    await stepThrough(control, fleet, order, 6);
    await Promise.all(all);
    expect(order).toEqual(['x', 'y', 'z', 'x', 'y', 'x']);
  });

  it('counts the other replicas: their requests in flight, and a higher class waiting there', async () => {
    let remoteHot = 5;
    let elsewhere: number | undefined = 0;
    const peers: FlowPeers = {
      inflight: (_m, tenant) => (tenant === 'hot' ? remoteHot : 0),
      highestWaiting: () => elsewhere,
      inflightByTenant: () => new Map([['hot', remoteHot]]),
    };
    const control = flow({}, peers);
    const fleet = new Fleet();
    const order: string[] = [];
    const signal = new AbortController().signal;
    const send = (t: FlowTicket) =>
      control.enter('m', t, signal, fleet.saturated)!.then(() => {
        order.push(t.tenant);
        fleet.busy = true;
      });
    const all = [send(ticket('hot')), send(ticket('small'))];
    await turn();
    fleet.open = true;
    // A high request waits on another replica: this one lets no normal one go.
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(order).toEqual([]);
    elsewhere = undefined;
    await new Promise((resolve) => setTimeout(resolve, 30));
    fleet.busy = false;
    remoteHot = 0;
    await Promise.all(all);
    // The hot tenant came first here, but has 5 in flight on the other replica.
    expect(order).toEqual(['small', 'hot']);
  });

  it('refuses a request whose queue deadline passes with 503 fleet_saturated and Retry-After', async () => {
    const control = flow();
    const waited = control.enter('m', ticket('a', 'normal', 20), new AbortController().signal, () => true)!;
    const err = await waited.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(FleetSaturated);
    const saturated = err as FleetSaturated;
    expect(saturated.status).toBe(503);
    expect(saturated.code).toBe('fleet_saturated');
    expect(Number(saturated.headers()['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(saturated.waitedMs).toBeGreaterThanOrEqual(19);
    expect(control.waiting('m')).toBe(0);
  });

  it('refuses at once a request whose wait would pass its deadline at the rate the queue moves', async () => {
    let clock = 0;
    const control = flow({}, undefined, () => clock);
    const fleet = new Fleet();
    const order: string[] = [];
    const signal = () => new AbortController().signal;
    const sent = Array.from({ length: 12 }, () =>
      control.enter('m', ticket('x'), signal(), fleet.saturated)!.then(() => {
        order.push('x');
        fleet.busy = true;
      }),
    );
    await turn();
    // Three leave, 20 ms apart on the injected clock: the queue moves at 50 per second.
    fleet.open = true;
    for (let i = 0; i < 3; i++) {
      clock += 20;
      fleet.busy = false;
      control.started('m', '')();
      await until(() => order.length === i + 1);
    }
    // 9 of the same tenant ahead at 50/s is 180 ms: past a 60 ms deadline, within 5 s.
    const hurried = control.enter('m', ticket('x', 'normal', 60), signal(), fleet.saturated)!;
    const err = (await hurried.then(
      () => undefined,
      (e: unknown) => e,
    )) as FleetSaturated;
    expect(err).toBeInstanceOf(FleetSaturated);
    expect(err.waitedMs).toBe(0);
    const patient = control.enter('m', ticket('x', 'normal', 5_000), signal(), fleet.saturated);
    expect(patient).toBeInstanceOf(Promise);
    // Another tenant has one of x's ahead of it at most (they take turns): 40 ms, it may wait 60.
    const other = control.enter('m', ticket('y', 'normal', 60), signal(), fleet.saturated)!;
    expect(control.waiting('m')).toBe(11);
    // Its deadline passes (the real timer): it was let wait, then refused.
    const err2 = (await other.catch((e: unknown) => e)) as FleetSaturated;
    expect(err2).toBeInstanceOf(FleetSaturated);
    control.close(new GatewayShuttingDown());
    await Promise.allSettled([...sent, patient]);
  });

  it('refuses past maxQueued, and lets a request that is given up leave the queue', async () => {
    const control = flow({ maxQueued: 1 });
    const gone = new AbortController();
    const first = control.enter('m', ticket('a'), gone.signal, () => true)!;
    const second = control.enter('m', ticket('b'), new AbortController().signal, () => true)!;
    await expect(second).rejects.toBeInstanceOf(FleetSaturated);
    gone.abort();
    await expect(first).rejects.toBeInstanceOf(ClientDisconnected);
    expect(control.waiting('m')).toBe(0);
  });

  it('gives engines a priority: the class first, then one step back for a heavy tenant only, counting the other replicas', () => {
    const { control, started, remote } = withRemoteTenants();
    const priority = (tenant: string, klass = 'normal') => control.enginePriority('m', ticket(tenant, klass));
    // Alone, a tenant is never heavy: there is nobody to be fair to.
    started('hot', 9);
    expect([priority('hot', 'high'), priority('hot'), priority('hot', 'low')]).toEqual([0, 2, 4]);
    // Beside a tenant with 2 in flight, 9 is more than twice as many: heavy, one step back within
    // its class (never past a lower class); the small tenant and a new one are not.
    started('small', 2);
    expect([priority('hot', 'high'), priority('hot'), priority('small'), priority('new')]).toEqual([
      1, 3, 2, 2,
    ]);
    // The other replicas' requests count: 10 more of small's elsewhere, and hot is no longer heavy.
    remote.clear();
    remote.set('small', 10);
    expect([priority('hot'), priority('small')]).toEqual([2, 2]);

    // Between tenants of about the same weight nobody goes back: 3 against a mean of 2 is not
    // more than twice as many; 5 against a mean of 7/3 is.
    const even = flow({ heavyShare: 2 });
    for (const [tenant, n] of [
      ['a', 2],
      ['b', 3],
      ['c', 2],
    ] as const)
      for (let i = 0; i < n; i++) even.started('m', tenant);
    expect(['a', 'b', 'c'].map((t) => even.enginePriority('m', ticket(t)))).toEqual([2, 2, 2]);
    for (let i = 0; i < 5; i++) even.started('m', 'd');
    expect(even.enginePriority('m', ticket('d'))).toBe(3);
  });

  it('names the heavy tenant of a model to the router, and the others light, only while one is heavy', () => {
    const { control, started, remote } = withRemoteTenants();
    const weights = () => ['hot', 'small', 'new'].map((t) => control.tenantWeight('m', t));
    // Nobody in flight, or one tenant alone: nobody is heavy.
    expect(weights()).toEqual([undefined, undefined, undefined]);
    started('hot', 9);
    expect(weights()).toEqual([undefined, undefined, undefined]);
    // 9 beside 2 is more than twice as many: hot is heavy, every other tenant (one with nothing in flight too) light.
    started('small', 2);
    expect(weights()).toEqual(['heavy', 'light', 'light']);
    expect(control.tenantWeight('other-model', 'hot')).toBeUndefined();
    // The other replicas' requests count: 10 more of small's elsewhere, and nobody is heavy.
    remote.clear();
    remote.set('small', 10);
    expect(weights()).toEqual([undefined, undefined, undefined]);
    // A tenant only the other replicas have in flight is counted too.
    remote.clear();
    remote.set('far', 40);
    expect([control.tenantWeight('m', 'far'), control.tenantWeight('m', 'hot')]).toEqual(['heavy', 'light']);
    // It agrees with the engines' priority: the heavy tenant is the one sent back.
    remote.clear();
    expect(control.enginePriority('m', ticket('hot'))).toBe(3);
    expect(control.enginePriority('m', ticket('small'))).toBe(2);
  });

  it('reports what it has in flight and waiting, for the other replicas', async () => {
    const control = flow();
    const end = control.started('m', 'a');
    const waiting = control.enter('m', ticket('b', 'low'), new AbortController().signal, () => true)!;
    const state = control.state();
    expect(state.inflight.get('m')?.get('a')).toBe(1);
    expect(state.waiting.get('m')?.get(2)).toBe(1);
    end();
    expect(control.state().inflight.size).toBe(0);
    control.close(new GatewayShuttingDown());
    await expect(waiting).rejects.toBeInstanceOf(GatewayShuttingDown);
    expect(control.waiting('m')).toBe(0);
  });
});
