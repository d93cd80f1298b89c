/**
 * The routing benchmark's clients: plays a workload's sessions against the gateway replicas,
 * sending each request to the next replica in turn (a round-robin load balancer in front of
 * them), each request a chat completion stream. Each session sends its turns one after the
 * other, the next with the whole conversation so far (the answers as they came), after its think
 * time. Records each request: when it was sent, its time to first token, the engine that served
 * it (`x-sluice-worker`), its output tokens, and how it ended.
 */
import { setMaxListeners } from 'node:events';
import { Pool } from 'undici';
import { sequence } from '../src/mock/generate.js';
import type { Session, Workload } from './routing-workloads.js';

export interface RequestRecord {
  /** Sent to the engine as `x-mock-trace-id`: the engine keeps its times under it. */
  traceId: string;
  session: number;
  turn: number;
  tenant: string;
  hot: boolean;
  /** Sent, in ms from the start of the cell. */
  sentMs: number;
  /** To the first content token; undefined when none came. */
  ttftMs: number | undefined;
  /** The engine that served it (the gateway's worker id). */
  worker: string | undefined;
  outputTokens: number;
  /** 'ok', an HTTP status, an error code, or 'cut' (still running when the cell ended). */
  outcome: string;
}

export interface CellRun {
  requests: RequestRecord[];
  /** When each content token arrived, in ms from the start of the cell. */
  tokenTimesMs: number[];
  /** From the start of the cell to its last request's end. */
  durationMs: number;
}

export interface CellOptions {
  /** The replicas' origins; requests take turns between them. */
  replicas: string[];
  model: string;
  workload: Workload;
  /** No turn is sent after this. */
  seconds: number;
  /** Requests still running this long after `seconds` are cut. */
  drainSeconds: number;
  tenantHeader: string;
}

interface Message {
  role: string;
  content: string;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

export async function runCell(options: CellOptions): Promise<CellRun> {
  const pools = options.replicas.map((origin) => new Pool(origin, { connections: 4096, pipelining: 1 }));
  const requests: RequestRecord[] = [];
  const tokenTimesMs: number[] = [];
  const cut = new AbortController();
  setMaxListeners(0, cut.signal); // every request of the cell listens to it
  const t0 = performance.now();
  const now = () => performance.now() - t0;
  const stopSending = options.seconds * 1000;
  let nextReplica = 0;
  let lastEnd = 0;

  async function send(session: Session, turn: number, messages: Message[]): Promise<string | undefined> {
    const record: RequestRecord = {
      traceId: `${options.model}/${requests.length}`,
      session: session.id,
      turn,
      tenant: session.tenant,
      hot: session.hot,
      sentMs: now(),
      ttftMs: undefined,
      worker: undefined,
      outputTokens: 0,
      outcome: 'ok',
    };
    requests.push(record);
    const pool = pools[nextReplica++ % pools.length]!;
    let answer = '';
    try {
      const res = await pool.request({
        method: 'POST',
        path: '/v1/chat/completions',
        headers: {
          'content-type': 'application/json',
          [options.tenantHeader]: session.tenant,
          'x-session-id': `s${session.id}`,
          'x-mock-trace-id': record.traceId,
        },
        body: JSON.stringify({
          model: options.model,
          messages,
          stream: true,
          max_tokens: session.turns[turn]!.maxTokens,
          stream_options: { include_usage: true },
        }),
        signal: cut.signal,
      });
      const worker = res.headers['x-sluice-worker'];
      record.worker = Array.isArray(worker) ? worker[0] : worker;
      if (res.statusCode !== 200) {
        record.outcome = String(res.statusCode);
        await res.body.text();
        return undefined;
      }
      let buffered = '';
      for await (const chunk of res.body) {
        buffered += (chunk as Buffer).toString('utf8');
        let end = buffered.indexOf('\n\n');
        while (end !== -1) {
          const event = buffered.slice(0, end);
          buffered = buffered.slice(end + 2);
          end = buffered.indexOf('\n\n');
          if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
          const data = JSON.parse(event.slice(6)) as {
            choices?: { delta?: { content?: string | null } }[];
            usage?: { completion_tokens?: number } | null;
            error?: unknown;
          };
          if (data.error !== undefined) record.outcome = 'error_event';
          const content = data.choices?.[0]?.delta?.content;
          if (content) {
            const at = now();
            if (record.ttftMs === undefined) record.ttftMs = at - record.sentMs;
            tokenTimesMs.push(at);
            answer += content;
          }
          if (data.usage?.completion_tokens !== undefined) record.outputTokens = data.usage.completion_tokens;
        }
      }
      if (record.outcome !== 'ok') return undefined;
      return answer;
    } catch (err) {
      record.outcome = cut.signal.aborted ? 'cut' : ((err as { code?: string }).code ?? 'error');
      return undefined;
    } finally {
      lastEnd = Math.max(lastEnd, now());
    }
  }

  async function play(session: Session): Promise<void> {
    const messages: Message[] =
      session.system === undefined ? [] : [{ role: 'system', content: session.system }];
    // The turns it had done before the cell: its history, with the answers the mock gives.
    for (let k = 0; k < session.firstTurn; k++) {
      messages.push({ role: 'user', content: session.turns[k]!.content });
      messages.push({ role: 'assistant', content: sequence(session.turns[k]!.maxTokens) });
    }
    await sleep(session.startMs - now());
    for (let k = session.firstTurn; k < session.turns.length; k++) {
      if (k > session.firstTurn) await sleep(session.turns[k]!.thinkMs);
      if (now() >= stopSending || cut.signal.aborted) return;
      messages.push({ role: 'user', content: session.turns[k]!.content });
      const answer = await send(session, k, messages);
      if (answer === undefined) return; // a failed turn ends its session
      messages.push({ role: 'assistant', content: answer });
    }
  }

  const all = Promise.all(options.workload.sessions.map(play));
  const deadline = setTimeout(() => cut.abort(), (options.seconds + options.drainSeconds) * 1000);
  await all;
  clearTimeout(deadline);
  await Promise.all(pools.map((p) => p.close()));
  return { requests, tokenTimesMs, durationMs: lastEnd };
}
