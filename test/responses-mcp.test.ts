import { connect } from 'node:net';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/load.js';
import { McpAllowlist } from '../src/mcp/allowlist.js';
import { sequence } from '../src/mock/generate.js';
import { eventually, metricOrZero, perTest, post } from './helpers/gateway.js';
import {
  type McpBehaviour,
  startMcpServer,
  startSseMcpServer,
  type TestMcpServer,
} from './helpers/mcp-servers.js';

/**
 * The MCP tool loop of the Responses API, against real MCP servers (the official SDK's McpServer
 * over Streamable HTTP on loopback) and the mock engine, scripted with `x-mock-tool-script`.
 * The embedded engine is not covered here (it is being changed in parallel).
 */

interface Parsed {
  name: string;
  data: string;
  event: { type: string; sequence_number: number; response?: Record<string, unknown> } & Record<
    string,
    unknown
  >;
}

function parseEvents(text: string): Parsed[] {
  return text
    .split('\n\n')
    .filter((b) => b.trim())
    .map((block) => {
      const data = /^data: (.*)$/m.exec(block)![1]!;
      return { name: /^event: (.*)$/m.exec(block)![1]!, data, event: JSON.parse(data) as Parsed['event'] };
    });
}

const terminalText = (data: string) => data.slice(data.indexOf('"response":') + 11, -1);
const SECRET = 'Bearer mcp-secret-7f3a9c';

type Item = Record<string, unknown> & { type: string };

describe('Responses API: the MCP tool loop', () => {
  const fx = perTest();
  const servers: TestMcpServer[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });

  async function mcp(behaviour: McpBehaviour, slowMs?: number): Promise<TestMcpServer> {
    const server = await startMcpServer(behaviour, slowMs);
    servers.push(server);
    return server;
  }

  async function setup(mcpSettings: Record<string, unknown> = {}) {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({
      workers: [{ url: workers[0]!.url }],
      mcp: { allowedServers: ['http://127.0.0.1:*/mcp'], callTimeoutMs: 400, ...mcpSettings },
    });
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    return { worker: workers[0]!, gateway, client };
  }

  const tool = (server: TestMcpServer, label: string, extra: Record<string, unknown> = {}) => ({
    type: 'mcp' as const,
    server_label: label,
    server_url: server.url,
    require_approval: 'never' as const,
    ...extra,
  });
  const script = (steps: unknown[]) => ({ 'x-mock-tool-script': JSON.stringify(steps) });

  async function stored(baseUrl: string, id: string): Promise<string> {
    return (await fetch(`${baseUrl}/v1/responses/${id}`)).text();
  }

  it('non-streaming (openai SDK): lists, calls the tool, feeds the result back and answers; stored byte-equal, headers never stored', async () => {
    const echo = await mcp('answer');
    const { gateway, client, worker } = await setup();
    const raw = await client.responses
      .create(
        {
          model: 'mock-model',
          input: 'say hi through the tool',
          tools: [tool(echo, 'echoer', { headers: { Authorization: SECRET } })],
        },
        { headers: script([{ name: 'echo', arguments: { text: 'hi' } }]) },
      )
      .asResponse();
    expect(raw.status).toBe(200);
    const text = await raw.text();
    const response = JSON.parse(text) as {
      id: string;
      status: string;
      output: Item[];
      tools: Item[];
      usage: Record<string, number>;
    };
    expect(response.status).toBe('completed');
    expect(response.output.map((i) => i.type)).toEqual(['mcp_list_tools', 'mcp_call', 'message']);
    const [listed, call, message] = response.output as [Item, Item, Item];
    expect(listed).toMatchObject({ server_label: 'echoer', tools: [{ name: 'echo' }] });
    expect(call).toMatchObject({
      server_label: 'echoer',
      name: 'echo',
      arguments: '{"text":"hi"}',
      output: 'echo: hi',
      error: null,
      status: 'completed',
    });
    expect(message).toMatchObject({ status: 'completed', content: [{ text: sequence(16) }] });
    // The server got the call, with the request's headers; the engine saw its result.
    expect(echo.calls).toEqual([{ text: 'hi' }]);
    expect(echo.headers.some((h) => h.authorization === SECRET)).toBe(true);
    expect(worker.stats.requests).toBe(2);
    const second = worker.stats.lastBodies.at(-1) as { messages: { role: string; content: unknown }[] };
    expect(second.messages.at(-1)).toMatchObject({ role: 'tool', content: 'echo: hi' });
    // Usage of both turns: the call (1 + 4 argument pieces) and the 16-token answer.
    expect(response.usage.output_tokens).toBe(21);
    // Stored exactly as sent, without the headers anywhere.
    expect(await stored(gateway.url, response.id)).toBe(text);
    expect(response.tools[0]).toMatchObject({ type: 'mcp', server_label: 'echoer', headers: null });
    const everything = [
      text,
      await (await fetch(`${gateway.url}/v1/responses/${response.id}/input_items`)).text(),
      await (await fetch(`${gateway.url}/v1/responses/${response.id}?stream=true`)).text(),
    ].join('\n');
    expect(everything).not.toContain('mcp-secret');
  });

  it('streaming (openai SDK): one event ladder over both turns, MCP events in order, terminal equals the stored response', async () => {
    const echo = await mcp('answer');
    const { gateway, client } = await setup();
    const stream = await client.responses.create(
      { model: 'mock-model', input: 'stream it', stream: true, tools: [tool(echo, 'echoer')] },
      { headers: script([{ name: 'echo', arguments: { text: 'streamed' } }]) },
    );
    const events: { type: string; sequence_number: number; response?: unknown }[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((e) => e.type);
    const order = [
      'response.created',
      'response.in_progress',
      'response.mcp_list_tools.in_progress',
      'response.mcp_list_tools.completed',
      'response.mcp_call.in_progress',
      'response.mcp_call_arguments.delta',
      'response.mcp_call_arguments.done',
      'response.mcp_call.completed',
      'response.output_text.delta',
      'response.output_text.done',
      'response.completed',
    ];
    let at = -1;
    for (const type of order) {
      const next = types.indexOf(type, at + 1);
      expect(next, type).toBeGreaterThan(at);
      at = next;
    }
    expect(types.filter((t) => t === 'response.completed')).toHaveLength(1);
    const terminal = events.at(-1)!.response as { id: string; output: Item[] };
    expect(terminal.output.map((i) => i.type)).toEqual(['mcp_list_tools', 'mcp_call', 'message']);
    expect(terminal.output[1]).toMatchObject({ output: 'echo: streamed', status: 'completed' });
    expect(await stored(gateway.url, terminal.id)).toBe(JSON.stringify(terminal));
  });

  it('a server that speaks only the older HTTP+SSE transport: the client falls back to it', async () => {
    const old = await startSseMcpServer();
    servers.push(old);
    const { gateway } = await setup({ allowedServers: ['http://127.0.0.1:*/sse'] });
    const res = await post(
      `${gateway.url}/v1/responses`,
      {
        model: 'mock-model',
        input: 'old school',
        tools: [tool(old, 'legacy', { headers: { 'x-api-key': 'k-123' } })],
      },
      script([{ name: 'echo', arguments: { text: 'sse' } }]),
    );
    expect(res.status).toBe(200);
    const response = res.json() as { output: Item[] };
    expect(response.output.map((i) => i.type)).toEqual(['mcp_list_tools', 'mcp_call', 'message']);
    expect(response.output[1]).toMatchObject({ output: 'echo: sse', status: 'completed' });
    expect(old.calls).toEqual([{ text: 'sse' }]);
    // The request's headers reached the event stream and the message posts alike.
    expect(old.headers.length).toBeGreaterThan(1);
    expect(old.headers.every((h) => h['x-api-key'] === 'k-123')).toBe(true);
  });

  it('a server that errors, one that dies mid-call and one that is too slow: mcp_call errors, the engine is told, the loop goes on', async () => {
    const [bad, dying, slow] = await Promise.all([mcp('error'), mcp('die'), mcp('slow', 5_000)]);
    const { gateway, worker } = await setup({ callTimeoutMs: 400 });
    const res = await post(
      `${gateway.url}/v1/responses`,
      {
        model: 'mock-model',
        input: 'try everything',
        stream: true,
        tools: [tool(bad, 'bad'), tool(dying, 'dying'), tool(slow, 'slow')],
      },
      script([
        { name: 'explode', arguments: { text: 'a' } },
        { name: 'vanish', arguments: { text: 'b' } },
        { name: 'dawdle', arguments: { text: 'c' } },
      ]),
    );
    const events = parseEvents(res.text);
    const last = events.at(-1)!;
    expect(last.name).toBe('response.completed');
    expect(events.map((e) => e.event.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.filter((e) => e.name === 'response.mcp_call.failed')).toHaveLength(3);
    const response = last.event.response as { id: string; output: Item[] };
    const calls = response.output.filter((i) => i.type === 'mcp_call');
    expect(calls.map((c) => [c.server_label, c.status, c.output])).toEqual([
      ['bad', 'failed', null],
      ['dying', 'failed', null],
      ['slow', 'failed', null],
    ]);
    const [explodeError, vanishError, dawdleError] = calls.map((c) => c.error as string);
    expect(explodeError).toContain('boom');
    // The dead server is told apart from the slow one: its connection was dropped (the test
    // server destroys its socket), it did not time out; the slow one timed out.
    expect(vanishError).toMatch(/^The MCP server closed the connection before answering \(\w+\)\.$/);
    expect(vanishError).not.toMatch(/within|timed out/i);
    expect(dawdleError).toBe('The MCP server did not answer within 400 ms.');
    expect(response.output.at(-1)).toMatchObject({ type: 'message', status: 'completed' });
    expect(worker.stats.requests).toBe(4);
    const final = worker.stats.lastBodies.at(-1) as { messages: { role: string; content: string }[] };
    const told = final.messages.filter((m) => m.role === 'tool').map((m) => m.content);
    expect(told).toEqual(
      [explodeError, vanishError, dawdleError].map((e) => `Error: the tool call failed: ${e}`),
    );
    expect(bad.calls).toHaveLength(1);
    expect(dying.calls).toHaveLength(1);
    expect(slow.calls).toHaveLength(1);
    await eventually(() => slow.aborted === 1); // the timed-out call was cancelled on the server
    // The calls are made one after the other: the slow server gets its call once the dying one's
    // failure is known. That took far less than the call timeout, as the slow server measured it
    // in this request (its call to its cancellation): the failure was the dropped connection, not
    // the timeout firing.
    const dyingFailureKnownAfter = slow.callTimes[0]! - dying.callTimes[0]!;
    const slowTimedOutAfter = slow.abortTimes[0]! - slow.callTimes[0]!;
    expect(dyingFailureKnownAfter).toBeLessThan(slowTimedOutAfter / 2);
    expect(await stored(gateway.url, response.id)).toBe(terminalText(last.data));
  });

  it.each([
    ['an error frame', 'error_frame_after:3', 'upstream_error_frame', 'upstream_error_frame'],
    ['a reset', 'reset_after:3', 'request_stream_closed', 'upstream_closed'],
    ['a stall', 'stall_after:3', 'stream_idle_timeout', 'idle_timeout'],
  ])(
    'an engine fault in the second turn (%s): response.failed with the first turn items kept, stored as sent, counted once',
    async (_, fault, code, reason) => {
      const echo = await mcp('answer');
      const workers = await fx.mocks(1);
      const gateway = await fx.gateway({
        workers: [{ url: workers[0]!.url }],
        timeouts: { idleMs: 300 },
        mcp: { allowedServers: ['http://127.0.0.1:*/mcp'] },
      });
      const failures = (labels: Record<string, string> = {}) =>
        metricOrZero(gateway.url, 'sluice_stream_failures_total', { api: 'responses', ...labels });
      const before = await failures();
      const beforeReason = await failures({ reason });
      const res = await post(
        `${gateway.url}/v1/responses`,
        { model: 'mock-model', input: 'fail later', stream: true, tools: [tool(echo, 'echoer')] },
        script([{ name: 'echo', arguments: { text: 'x' } }, { fault }]),
      );
      const events = parseEvents(res.text);
      expect(events.map((e) => e.event.sequence_number)).toEqual(events.map((_, i) => i));
      const last = events.at(-1)!;
      expect(last.name).toBe('response.failed');
      expect(events.filter((e) => /^response\.(completed|failed|incomplete)$/.test(e.name))).toHaveLength(1);
      const response = last.event.response as {
        id: string;
        status: string;
        error: { code: string };
        output: Item[];
      };
      expect(response.status).toBe('failed');
      expect(response.error.code).toBe(code);
      expect(response.output.map((i) => [i.type, i.status])).toEqual([
        ['mcp_list_tools', 'completed'],
        ['mcp_call', 'completed'],
        ['message', 'incomplete'],
      ]);
      expect(response.output[1]).toMatchObject({ output: 'echo: x' });
      expect((response.output[2]!.content as { text: string }[])[0]!.text).toBe(sequence(3));
      expect(await stored(gateway.url, response.id)).toBe(terminalText(last.data));
      // The stored events are the events sent.
      const replay = await (await fetch(`${gateway.url}/v1/responses/${response.id}?stream=true`)).text();
      expect(parseEvents(replay).map((e) => e.data)).toEqual(events.map((e) => e.data));
      // Counted once, under the fault's reason.
      await eventually(async () => (await failures({ reason })) === beforeReason + 1);
      expect(await failures()).toBe(before + 1);
      expect(echo.calls).toHaveLength(1);
    },
  );

  it('an API key: its model limits apply, and the tokens of every turn count toward its usage', async () => {
    const echo = await mcp('answer');
    const workers = await fx.mocks(1, { models: ['mock-model', 'other-model'] });
    const ADMIN = 'admin-key-for-tests-0123456789';
    const gateway = await fx.gateway({
      auth: { adminKey: ADMIN },
      workers: [{ url: workers[0]!.url }],
      mcp: { allowedServers: ['http://127.0.0.1:*/mcp'] },
    });
    const admin = (path: string, init: RequestInit = {}) =>
      fetch(`${gateway.url}/admin${path}`, {
        ...init,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN}` },
      });
    const created = (await (
      await admin('/keys', { method: 'POST', body: JSON.stringify({ name: 'mcp', models: ['mock-model'] }) })
    ).json()) as { id: string; key: string };
    const auth = { authorization: `Bearer ${created.key}` };
    const body = { model: 'mock-model', input: 'count me', tools: [tool(echo, 'echoer')] };
    const res = await post(`${gateway.url}/v1/responses`, body, {
      ...auth,
      ...script([{ name: 'echo', arguments: { text: 'hi' } }]),
    });
    expect(res.status).toBe(200);
    const response = res.json() as { usage: { input_tokens: number; output_tokens: number } };
    expect(response.usage.output_tokens).toBe(21);
    await eventually(async () => {
      const usage = (await (await admin(`/keys/${created.id}/usage`)).json()) as Record<string, number>;
      return usage.completion_tokens === 21 && usage.prompt_tokens === response.usage.input_tokens;
    });
    const refused = await post(`${gateway.url}/v1/responses`, { ...body, model: 'other-model' }, auth);
    expect(refused.status).toBe(403);
    expect(echo.calls).toHaveLength(1);
  });

  it('the allowlist: an unlisted server URL is a 400 naming the setting; none is allowed by default; a server that cannot list is a 424', async () => {
    const echo = await mcp('answer');
    const { gateway } = await setup({ allowedServers: ['https://*.tools.example.com/*'] });
    const refused = await post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: 'x',
      tools: [tool(echo, 'echoer')],
    });
    expect(refused.status).toBe(400);
    expect(refused.json()).toMatchObject({ error: { code: 'mcp_server_not_allowed' } });
    expect(refused.text).toContain('mcp.allowedServers');
    expect(echo.headers).toHaveLength(0); // never contacted

    const workers = await fx.mocks(1);
    const closed = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const byDefault = await post(`${closed.url}/v1/responses`, {
      model: 'mock-model',
      input: 'x',
      tools: [tool(echo, 'echoer')],
    });
    expect(byDefault.status).toBe(400);

    const { gateway: open } = await setup();
    const down = await mcp('answer');
    await down.close();
    const unlisted = await post(`${open.url}/v1/responses`, {
      model: 'mock-model',
      input: 'x',
      stream: true,
      tools: [tool(down, 'gone')],
    });
    expect(unlisted.status).toBe(424);
    expect(unlisted.json()).toMatchObject({ error: { code: 'mcp_list_tools_failed' } });
  });

  it('approval: the call waits as an mcp_approval_request; the mcp_approval_response of the next request makes it and the loop goes on', async () => {
    const echo = await mcp('answer');
    const { gateway, client } = await setup();
    const tools = [tool(echo, 'echoer', { require_approval: 'always' })];
    const headers = script([{ name: 'echo', arguments: { text: 'approved' } }]);
    const first = await client.responses.create(
      { model: 'mock-model', input: 'ask first', tools },
      { headers },
    );
    expect(first.status).toBe('completed');
    expect(first.output.map((i) => i.type)).toEqual(['mcp_list_tools', 'mcp_approval_request']);
    const asked = first.output[1] as { id: string; name: string; arguments: string; server_label: string };
    expect(asked).toMatchObject({ name: 'echo', arguments: '{"text":"approved"}', server_label: 'echoer' });
    expect(echo.calls).toHaveLength(0);

    const raw = await client.responses
      .create(
        {
          model: 'mock-model',
          previous_response_id: first.id,
          input: [{ type: 'mcp_approval_response', approval_request_id: asked.id, approve: true }],
          tools,
        },
        { headers },
      )
      .asResponse();
    const text = await raw.text();
    const second = JSON.parse(text) as { id: string; status: string; output: Item[] };
    expect(second.status).toBe('completed');
    expect(second.output.map((i) => i.type)).toEqual(['mcp_list_tools', 'mcp_call', 'message']);
    expect(second.output[1]).toMatchObject({ approval_request_id: asked.id, output: 'echo: approved' });
    expect(echo.calls).toEqual([{ text: 'approved' }]);
    expect(await stored(gateway.url, second.id)).toBe(text);

    // A denial: no call; the engine is told and answers.
    const third = await client.responses.create({ model: 'mock-model', input: 'again', tools }, { headers });
    const again = third.output[1] as { id: string };
    const denied = await client.responses.create(
      {
        model: 'mock-model',
        previous_response_id: third.id,
        input: [{ type: 'mcp_approval_response', approval_request_id: again.id, approve: false }],
        tools,
      },
      { headers },
    );
    expect(denied.output.map((i) => i.type)).toEqual(['mcp_list_tools', 'message']);
    expect(echo.calls).toHaveLength(1);
  });

  it('max_tool_calls bounds the loop: past it the engine gets no MCP tools and answers', async () => {
    const echo = await mcp('answer');
    const { gateway, worker } = await setup({ maxToolCalls: 5 });
    const step = { name: 'echo', arguments: { text: 'again' } };
    const res = await post(
      `${gateway.url}/v1/responses`,
      { model: 'mock-model', input: 'loop', max_tool_calls: 2, tools: [tool(echo, 'echoer')] },
      script([step, step, step, step, step, step]),
    );
    expect(res.status).toBe(200);
    const response = res.json() as { id: string; output: Item[] };
    expect(response.output.map((i) => i.type)).toEqual(['mcp_list_tools', 'mcp_call', 'mcp_call', 'message']);
    expect(echo.calls).toHaveLength(2);
    expect(worker.stats.requests).toBe(3);
    expect((worker.stats.lastBodies.at(-1) as { tools?: unknown }).tools).toBeUndefined();
    expect(await stored(gateway.url, response.id)).toBe(res.text);

    // The gateway's own bound applies when the request sets none.
    const capped = await setup({ maxToolCalls: 1 });
    const again = await post(
      `${capped.gateway.url}/v1/responses`,
      { model: 'mock-model', input: 'loop', tools: [tool(echo, 'echoer')] },
      script([step, step, step]),
    );
    expect((again.json() as { output: Item[] }).output.filter((i) => i.type === 'mcp_call')).toHaveLength(1);
  });

  it('background: the loop runs detached and a cancel during an MCP call ends it, the call closed as incomplete', async () => {
    const slow = await mcp('slow', 10_000);
    const { gateway } = await setup({ callTimeoutMs: 20_000 });
    const res = await post(
      `${gateway.url}/v1/responses`,
      { model: 'mock-model', input: 'slowly', background: true, tools: [tool(slow, 'slow')] },
      script([{ name: 'dawdle', arguments: { text: 'z' } }]),
    );
    const queued = res.json() as { id: string; status: string };
    expect(queued.status).toBe('queued');
    await eventually(() => slow.calls.length === 1);
    const cancelled = await post(`${gateway.url}/v1/responses/${queued.id}/cancel`, {});
    const body = cancelled.json() as { status: string; output: Item[] };
    expect(body.status).toBe('cancelled');
    expect(body.output.map((i) => [i.type, i.status])).toEqual([
      ['mcp_list_tools', 'completed'],
      ['mcp_call', 'incomplete'],
    ]);
    await eventually(() => slow.aborted === 1);
    expect(await stored(gateway.url, queued.id)).toBe(cancelled.text);
  });

  it('a client that disconnects aborts the MCP call in flight', async () => {
    const slow = await mcp('slow', 10_000);
    const { gateway } = await setup({ callTimeoutMs: 20_000 });
    // A raw socket: closing it is what a client that goes away does (fetch's abort may wait for the next byte).
    const socket = connect(new URL(gateway.url).port ? Number(new URL(gateway.url).port) : 80, '127.0.0.1');
    const body = JSON.stringify({
      model: 'mock-model',
      input: 'x',
      stream: true,
      tools: [tool(slow, 'slow')],
    });
    const headers = {
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(body)),
      ...script([{ name: 'dawdle', arguments: { text: 'q' } }]),
    };
    socket.write(
      `POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\n${Object.entries(headers)
        .map(([k, v]) => `${k}: ${v}`)
        .join('\r\n')}\r\n\r\n${body}`,
    );
    await eventually(() => slow.calls.length === 1).catch(() => {
      throw new Error('the MCP call never came');
    });
    socket.destroy();
    await eventually(() => slow.aborted === 1).catch(() => {
      throw new Error(`the MCP call was not aborted (${slow.aborted})`);
    });
    await eventually(
      async () =>
        (await metricOrZero(gateway.url, 'sluice_client_disconnects_total', { api: 'responses' })) === 1,
    );
  });

  it('mid-stream resume resumes the turn that broke and never makes a completed MCP call again', async () => {
    const echo = await mcp('answer');
    const workers = await fx.mocks(2);
    const gateway = await fx.gateway({
      workers: workers.map((w) => ({ url: w.url })),
      resume: { enabled: true, maxAttempts: 2 },
      mcp: { allowedServers: ['http://127.0.0.1:*/mcp'] },
    });
    const res = await post(
      `${gateway.url}/v1/responses`,
      { model: 'mock-model', input: 'resume me', stream: true, tools: [tool(echo, 'echoer')] },
      script([{ name: 'echo', arguments: { text: 'once' } }, { fault: 'reset_after:3' }]),
    );
    const events = parseEvents(res.text);
    const last = events.at(-1)!;
    expect(last.name).toBe('response.completed');
    expect(events.map((e) => e.event.sequence_number)).toEqual(events.map((_, i) => i));
    const response = last.event.response as { id: string; output: Item[]; metadata: Record<string, string> };
    expect(response.output.map((i) => i.type)).toEqual(['mcp_list_tools', 'mcp_call', 'message']);
    // The 3 tokens shown before the reset, then the continuation's 16 (no max_output_tokens): one text.
    expect((response.output[2]!.content as { text: string }[])[0]!.text).toBe(sequence(19));
    expect(response.metadata.sluice_resumes).toBe('1');
    expect(echo.calls).toHaveLength(1);
    expect(workers[0]!.stats.requests + workers[1]!.stats.requests).toBe(3);
    expect(await stored(gateway.url, response.id)).toBe(terminalText(last.data));
  });

  it('the allowlist patterns, and SLUICE_MCP_ALLOWED_SERVERS', () => {
    const list = new McpAllowlist(['http://127.0.0.1:*/mcp', 'https://*.tools.example.com/*']);
    expect(list.allows('http://127.0.0.1:4567/mcp')).toBe(true);
    expect(list.allows('https://a.tools.example.com/v1/mcp')).toBe(true);
    expect(list.allows('https://tools.example.com/mcp')).toBe(false);
    expect(list.allows('https://evil.example.org/?x=.tools.example.com/')).toBe(false);
    expect(list.allows('http://user:pw@127.0.0.1:1/mcp')).toBe(false);
    expect(list.allows('file:///etc/passwd')).toBe(false);
    expect(new McpAllowlist([]).allows('http://127.0.0.1:1/mcp')).toBe(false);
    const config = loadConfig(
      {},
      { SLUICE_MCP_ALLOWED_SERVERS: 'http://127.0.0.1:*/mcp, https://*.tools.example.com/*' },
    );
    expect(config.mcp.allowedServers).toEqual(['http://127.0.0.1:*/mcp', 'https://*.tools.example.com/*']);
    expect(config.mcp).toMatchObject({ maxToolCalls: 16, callTimeoutMs: 30_000, totalTimeoutMs: 300_000 });
  });
});
