import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConversationGone } from '../src/errors/storage-errors.js';
import { failedOrphan } from '../src/responses/orphan-sweeper.js';
import { PostgresStore, SqliteStore, type Store, type StoredResponse } from '../src/storage/index.js';
import { POSTGRES_URL } from './helpers/backends.js';

/** Two stores on one database: two gateway replicas. */
interface Pair {
  name: string;
  open(): Promise<[Store, Store]>;
  cleanup(): Promise<void>;
}

const sqlitePair = (): Pair => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-durability-'));
  const stores: Store[] = [];
  return {
    name: 'sqlite',
    async open() {
      const path = join(dir, 'sluice.db');
      const pair: [Store, Store] = [new SqliteStore(path), new SqliteStore(path)];
      stores.push(...pair);
      for (const store of pair) await store.migrate();
      return pair;
    },
    async cleanup() {
      await Promise.all(stores.map((s) => s.close()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
};

const postgresPair = (): Pair => {
  const schema = `durability_${process.pid}_${Date.now().toString(36)}`;
  const stores: Store[] = [];
  return {
    name: 'postgres',
    async open() {
      const pair: [Store, Store] = [
        new PostgresStore(POSTGRES_URL, { schema }),
        new PostgresStore(POSTGRES_URL, { schema }),
      ];
      stores.push(...pair);
      for (const store of pair) await store.migrate();
      return pair;
    },
    async cleanup() {
      await Promise.all(stores.map((s) => s.close()));
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    },
  };
};

let counter = 0;
function stored(overrides: Partial<StoredResponse> = {}): StoredResponse {
  const id = `resp_d${++counter}_${Date.now().toString(36)}`;
  return {
    id,
    json: JSON.stringify({ id, status: 'in_progress' }),
    status: 'in_progress',
    model: 'm',
    createdAt: 1,
    previousResponseId: null,
    conversationId: null,
    inputItemsJson: '[]',
    eventsJson: '[{"type":"response.created","sequence_number":0}]',
    cancelRequested: false,
    ownerKeyId: null,
    ownerReplicaId: null,
    ...overrides,
  };
}

/** A background response stored mid-way: a message with partial text, still open. */
function midway(id: string) {
  const message = {
    id: 'msg_1',
    type: 'message',
    status: 'in_progress',
    role: 'assistant',
    content: [{ type: 'output_text', text: 'Hel', annotations: [], logprobs: [] }],
  };
  const response = {
    id,
    object: 'response',
    status: 'in_progress',
    completed_at: null,
    error: null,
    incomplete_details: null,
    output: [message],
  };
  const events = [
    { type: 'response.created', sequence_number: 0, response: { ...response, output: [] } },
    { type: 'response.in_progress', sequence_number: 1, response: { ...response, output: [] } },
    {
      type: 'response.output_item.added',
      sequence_number: 2,
      output_index: 0,
      item: { ...message, content: [] },
    },
    {
      type: 'response.content_part.added',
      sequence_number: 3,
      item_id: 'msg_1',
      output_index: 0,
      content_index: 0,
    },
    { type: 'response.output_text.delta', sequence_number: 4, item_id: 'msg_1', delta: 'Hel' },
  ];
  return { json: JSON.stringify(response), eventsJson: JSON.stringify(events) };
}

for (const makePair of [sqlitePair, postgresPair]) {
  const pair = makePair();
  describe(`background response durability in storage (${pair.name})`, () => {
    let a: Store;
    let b: Store;
    beforeAll(async () => {
      [a, b] = await pair.open();
    });
    afterAll(async () => {
      await pair.cleanup();
    });

    it('a progress write that lands after the terminal write changes nothing (the status never moves backwards)', async () => {
      const row = stored();
      await a.insertResponse(row);
      const terminal = { json: '{"status":"completed"}', status: 'completed', eventsJson: '[1,2]' };
      expect(await a.updateResponse(row.id, terminal)).toBe(true);
      // The late progress write, from this replica or any other.
      expect(
        await b.updateResponse(row.id, {
          json: '{"status":"in_progress"}',
          status: 'in_progress',
          eventsJson: '[1]',
        }),
      ).toBe(false);
      expect(await a.updateResponse(row.id, { json: '{}', status: 'failed' })).toBe(false);
      expect(await b.getResponse(row.id)).toMatchObject({
        status: 'completed',
        json: terminal.json,
        eventsJson: '[1,2]',
      });
      // Nor does in_progress go back to queued.
      const other = stored();
      await a.insertResponse(other);
      expect(await a.updateResponse(other.id, { json: '{}', status: 'queued' })).toBe(false);
      expect((await a.getResponse(other.id))?.status).toBe('in_progress');
    });

    it('a progress write appends only the new events', async () => {
      const row = stored({ eventsJson: '[{"n":0}]' });
      await a.insertResponse(row);
      expect(
        await a.updateResponse(row.id, {
          json: '{}',
          status: 'in_progress',
          appendEventsJson: '{"n":1},{"n":"é😀"}',
        }),
      ).toBe(true);
      expect((await b.getResponse(row.id))?.eventsJson).toBe('[{"n":0},{"n":1},{"n":"é😀"}]');
      expect(
        await a.updateResponse(row.id, { json: '{}', status: 'in_progress', appendEventsJson: '{"n":3}' }),
      ).toBe(true);
      expect((await b.getResponse(row.id))?.eventsJson).toBe('[{"n":0},{"n":1},{"n":"é😀"},{"n":3}]');
      const empty = stored({ eventsJson: '[]' });
      await a.insertResponse(empty);
      await a.updateResponse(empty.id, { json: '{}', status: 'in_progress', appendEventsJson: '{"n":0}' });
      expect((await b.getResponse(empty.id))?.eventsJson).toBe('[{"n":0}]');
    });

    it('concurrent progress and terminal writes: the terminal one always stays', async () => {
      const rows = Array.from({ length: 20 }, () => stored());
      for (const row of rows) await a.insertResponse(row);
      await Promise.all(
        rows.flatMap((row) => [
          b.updateResponse(row.id, { json: '{"p":1}', status: 'in_progress' }),
          a.updateResponse(row.id, { json: '{"t":1}', status: 'completed', eventsJson: '[]' }),
          b.updateResponse(row.id, { json: '{"p":2}', status: 'in_progress' }),
        ]),
      );
      for (const row of rows)
        expect(await b.getResponse(row.id)).toMatchObject({ status: 'completed', json: '{"t":1}' });
    });

    it("a response's end and its conversation append are one transaction", async () => {
      const missing = 'conv_gone_forever';
      const row = stored({ status: 'completed', conversationId: missing });
      const error = await a
        .finishResponse({ insert: row, conversation: { id: missing, items: [{ id: 'msg_x', json: '{}' }] } })
        .catch((err: unknown) => err);
      expect(error).toBeInstanceOf(ConversationGone);
      expect(error).toMatchObject({ code: 'store_conversation_gone' });
      expect(await a.getResponse(row.id)).toBeUndefined();

      const background = stored();
      await a.insertResponse(background);
      const update = { id: background.id, json: '{"s":"completed"}', status: 'completed', eventsJson: '[]' };
      await expect(a.finishResponse({ update, conversation: { id: missing, items: [] } })).rejects.toThrow(
        ConversationGone,
      );
      expect((await a.getResponse(background.id))?.status).toBe('in_progress');
      expect(await a.finishResponse({ update })).toBe(true);
      // Ended: a second end is refused, and reported as such.
      expect(await b.finishResponse({ update: { ...update, json: '{}', status: 'failed' } })).toBe(false);
      expect((await a.getResponse(background.id))?.json).toBe('{"s":"completed"}');
    });

    it("a replica's responses are orphans only once its lease lapsed, and exactly one replica ends each", async () => {
      const live = `replica_live_${counter}`;
      const dying = `replica_dying_${counter}`;
      await a.renewReplicaLease(live, 60_000);
      await a.renewReplicaLease(dying, 60_000);
      const kept = stored({ ownerReplicaId: live });
      const orphan = stored({ ownerReplicaId: dying, ...midway('x') });
      await a.insertResponse(kept);
      await a.insertResponse(orphan);
      const query = { limit: 100, unownedUpdatedBefore: 0 };
      const ids = async () => (await b.listOrphanedResponses(query)).map((o) => o.id);
      expect(await ids()).not.toContain(orphan.id);
      // The lease lapses (a short renewal, then silence).
      await a.renewReplicaLease(dying, 1);
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(await ids()).toContain(orphan.id);
      expect(await ids()).not.toContain(kept.id);
      const [found] = await b.listOrphanedResponses({ ...query, id: orphan.id });
      expect(found).toMatchObject({ id: orphan.id, ownerReplicaId: dying });
      const update = failedOrphan(found!);
      const results = await Promise.all([
        a.endOrphanedResponse(found!, update),
        b.endOrphanedResponse(found!, update),
      ]);
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(await a.getResponse(orphan.id)).toMatchObject({ status: 'failed', json: update.json });
      expect(await ids()).not.toContain(orphan.id);
    });

    it('an orphan is not ended from a stale read, nor once its owner renewed its lease', async () => {
      const owner = `replica_back_${counter}`;
      await a.renewReplicaLease(owner, 1);
      const row = stored({ ownerReplicaId: owner });
      await a.insertResponse(row);
      await new Promise((resolve) => setTimeout(resolve, 20));
      const [found] = await b.listOrphanedResponses({ limit: 1, unownedUpdatedBefore: 0, id: row.id });
      expect(found).toBeDefined();
      // The owner wrote progress after the read: the read is stale.
      await new Promise((resolve) => setTimeout(resolve, 5));
      expect(await a.updateResponse(row.id, { json: '{"p":2}', status: 'in_progress' })).toBe(true);
      expect(await b.endOrphanedResponse(found!, failedOrphan({ ...found!, json: '{"output":[]}' }))).toBe(
        false,
      );
      // The owner came back: its lease is live again.
      const [again] = await b.listOrphanedResponses({ limit: 1, unownedUpdatedBefore: 0, id: row.id });
      await a.renewReplicaLease(owner, 60_000);
      expect(await b.endOrphanedResponse(again!, failedOrphan({ ...again!, json: '{"output":[]}' }))).toBe(
        false,
      );
      expect((await a.getResponse(row.id))?.status).toBe('in_progress');
      await a.dropReplicaLease(owner);
      expect((await b.listOrphanedResponses({ limit: 1, unownedUpdatedBefore: 0, id: row.id })).length).toBe(
        1,
      );
    });
  });
}

describe('an orphan ended as failed', () => {
  it('closes its open items as incomplete and ends its events with one response.failed', () => {
    const { json, eventsJson } = midway('resp_mid');
    const ended = failedOrphan({ id: 'resp_mid', ownerReplicaId: 'r', json, eventsJson, updatedAt: 1 });
    const response = JSON.parse(ended.json);
    expect(ended.status).toBe('failed');
    expect(response).toMatchObject({
      status: 'failed',
      completed_at: null,
      error: { code: 'gateway_restarted' },
      output: [{ id: 'msg_1', status: 'incomplete', content: [{ text: 'Hel' }] }],
    });
    const events = JSON.parse(ended.eventsJson!) as {
      type: string;
      sequence_number: number;
      response?: unknown;
    }[];
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.slice(5).map((e) => e.type)).toEqual([
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.failed',
    ]);
    expect(
      events.filter((e) => e.type.startsWith('response.') && /failed|completed|incomplete$/.test(e.type)),
    ).toHaveLength(1);
    expect(events.at(-1)!.response).toEqual(response);
    // The stored events before the new ones are kept byte for byte.
    expect(ended.eventsJson!.startsWith(eventsJson.slice(0, -1))).toBe(true);
  });

  it('with no stored events, its events are the one terminal event', () => {
    const ended = failedOrphan({
      id: 'r',
      ownerReplicaId: null,
      json: '{"id":"r","output":[]}',
      eventsJson: null,
      updatedAt: 1,
    });
    const events = JSON.parse(ended.eventsJson!);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ type: 'response.failed', sequence_number: 0 });
  });
});
