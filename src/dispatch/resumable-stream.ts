import { isSluiceError } from '../errors/base.js';
import { ClientDisconnected } from '../errors/http-errors.js';
import type { StreamError } from '../errors/stream-errors.js';
import type { Hold } from '../memory/held-bytes.js';
import type { ParsedChunk, Usage } from '../streams/chat-stream-tracker.js';
import type { EngineStreamSink } from '../streams/engine-stream.js';
import { parseSseFieldsAt, SseSplitter } from '../streams/sse-splitter.js';
import type { Worker } from '../workers/worker.js';
import { outcomeOf } from './classify-upstream-error.js';
import type { OpenedStream, ResumePlan } from './types.js';

export type { Continuation, ResumePlan } from './types.js';

interface DeltaLike {
  content?: unknown;
  reasoning_content?: unknown;
  reasoning?: unknown;
  tool_calls?: unknown;
  role?: unknown;
}

/** The usage chunk that `stream_options.include_usage` adds at the end: no choices, only usage. */
function isUsageOnly(chunk: ParsedChunk): boolean {
  return chunk.usage != null && Array.isArray(chunk.choices) && chunk.choices.length === 0;
}

/** The events of `raw` without its usage-only ones (the usage the gateway asked for itself). */
function withoutUsageEvents(raw: Buffer): Buffer {
  const kept: Buffer[] = [];
  new SseSplitter().push(raw, (bytes, start, end) => {
    const event = bytes.subarray(start, end);
    const { data } = parseSseFieldsAt(bytes, start, end);
    if (data === undefined || data === '[DONE]' || !data.includes('"usage"')) {
      kept.push(event);
      return;
    }
    try {
      if (!isUsageOnly(JSON.parse(data) as ParsedChunk)) kept.push(event);
    } catch {
      kept.push(event);
    }
  });
  return Buffer.concat(kept);
}

/**
 * The engine stream a client reads, which may span several upstream attempts. The first
 * attempt's bytes are relayed untouched. When mid-stream resume is on and the stream fails with
 * a retryable cause, the request is re-issued to another worker as a continuation of the text
 * shown so far, and that attempt's chunks are rewritten into the same stream: its opening role
 * chunk dropped, the first attempt's `id` and `created` kept, usage summed over the attempts.
 * It resumes only plain text on one choice: a tool call or reasoning in progress, or several
 * choices, cannot be continued safely, and end with the normal terminal failure.
 */
export class ResumableStream {
  private current: OpenedStream;
  private sink: EngineStreamSink | undefined;
  private text = '';
  private tokensThisAttempt = 0;
  /** Output chunks of each failed attempt, for the usage estimate. */
  private readonly failedTokens: number[] = [];
  private unsafe: string | undefined;
  private id: string | undefined;
  private model: string | undefined;
  private created: number | undefined;
  private ended = false;
  private abandoned = false;
  private paused = false;
  private lastUsage: Usage | undefined;
  readonly workers: string[];
  /** The model of each part of the stream, in order (a continuation on a fallback names its own). */
  readonly models: string[];
  private readonly attempts: Worker[];
  /** Workers that failed this stream (made at the first failure). */
  private failed: Set<string> | undefined;

  constructor(
    first: OpenedStream,
    private readonly plan: ResumePlan | undefined,
    private readonly options: {
      dropUsage?: boolean;
      /**
       * The stream's account with the gateway's budget of what requests hold: the text kept for
       * a continuation takes from it, and is let go (the stream then cannot resume) when it is full.
       */
      hold?: Hold | undefined;
    } = {},
  ) {
    this.current = first;
    this.unsafe = plan?.unsafe;
    this.workers = [first.attempt.worker.id];
    this.models = [first.attempt.model];
    this.attempts = [first.attempt.worker];
  }

  get worker(): string {
    return this.current.attempt.worker.id;
  }
  /** The model the current attempt is answering with (a fallback's after a fallback). */
  get attemptModel(): string {
    return this.current.attempt.model;
  }
  /** The id the current attempt's engine was sent (`X-Request-Id` upstream). */
  get upstreamRequestId(): string {
    return this.current.attempt.requestId;
  }
  /** The current worker as API clients may see it (undefined: hidden). */
  get clientWorker(): string | undefined {
    return this.current.attempt.worker.clientName;
  }
  /** The workers of every attempt as API clients may see them (empty: hidden). */
  get clientWorkers(): string[] {
    return this.attempts.flatMap((w) => (w.clientName === undefined ? [] : [w.clientName]));
  }
  get resumes(): number {
    return this.workers.length - 1;
  }
  get usage(): Usage | undefined {
    return this.lastUsage;
  }
  /** The `id` and `model` of the first chunk (the response's, kept over resumes). */
  get response(): { id: string | undefined; model: string | undefined } {
    return { id: this.id, model: this.model };
  }
  get finishReason(): string | undefined {
    return this.current.stream.tracker.finishReason;
  }

  attach(sink: EngineStreamSink): void {
    this.sink = sink;
    this.follow(this.current, false);
  }

  pause(): void {
    this.paused = true;
    this.current.stream.pause();
  }

  resume(): void {
    this.paused = false;
    this.current.stream.resume();
  }

  /**
   * Ends the stream with `error` (a bound of what its consumer holds was passed): the engine
   * request is aborted and the sink told, as for any failure of the stream (a retryable one may
   * resume; a bound's is not retryable).
   */
  fail(error: StreamError): void {
    if (this.ended) return;
    this.current.stream.abort(error, true);
  }

  /** Ends silently (nobody is left to tell) and frees the engine at once. */
  abandon(reason: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.abandoned = true;
    this.options.hold?.release();
    this.current.stream.abort(reason, false);
    this.current.attempt.release('neutral', reason);
  }

  private follow(opened: OpenedStream, continuation: boolean): void {
    const sink = this.sink!;
    this.tokensThisAttempt = 0;
    opened.sink.attach({
      onEvents: (raw, chunks) => {
        if (this.ended) return;
        for (const chunk of chunks) this.observe(chunk);
        if (!continuation) {
          if (this.options.dropUsage && chunks.some(isUsageOnly)) {
            const kept = chunks.filter((c) => !isUsageOnly(c));
            sink.onEvents(withoutUsageEvents(raw), kept);
          } else {
            sink.onEvents(raw, chunks);
          }
          return;
        }
        // A continuation's usage chunk (summed over the attempts) is counted all the same, and
        // shown only to a client that asked for usage, as on the first attempt.
        const rewritten = chunks
          .map((chunk) => this.rewrite(chunk))
          .filter((c): c is ParsedChunk => c !== undefined && !(this.options.dropUsage && isUsageOnly(c)));
        if (rewritten.length > 0) {
          sink.onEvents(
            Buffer.from(rewritten.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('')),
            rewritten,
          );
        }
      },
      onComplete: (sawDone) => {
        opened.attempt.release('success');
        if (this.ended) return;
        this.ended = true;
        this.options.hold?.release();
        // A continuation's bytes were rebuilt from its chunks: its [DONE] is written anew.
        sink.onComplete(continuation ? false : sawDone);
      },
      onFail: (error) => {
        opened.attempt.release(outcomeOf(error), error);
        if (this.ended) return;
        void this.failOrResume(error);
      },
    });
  }

  /** Follows what was generated, to build a continuation and to know whether one is safe. */
  private observe(chunk: ParsedChunk): void {
    if (this.id === undefined && typeof chunk.id === 'string') {
      this.id = chunk.id;
      if (typeof chunk.model === 'string') this.model = chunk.model;
    }
    if (this.created === undefined && typeof chunk.created === 'number') this.created = chunk.created;
    if (chunk.usage) this.lastUsage = chunk.usage;
    // What follows (the text so far, its token count, whether continuing is safe) serves only a
    // continuation: a stream that cannot resume skips it for every chunk it relays.
    if (!this.plan || this.unsafe) return;
    const choices = chunk.choices ?? [];
    if (
      choices.length > 1 ||
      (choices.length === 1 && typeof choices[0]!.index === 'number' && choices[0]!.index > 0)
    ) {
      this.unsafe = 'several choices';
    }
    const choice = choices[0];
    if (!choice) return;
    const delta = choice.delta as DeltaLike | undefined;
    const piece =
      typeof delta?.content === 'string' ? delta.content : typeof choice.text === 'string' ? choice.text : '';
    if (piece.length > 0) {
      this.text += piece;
      this.tokensThisAttempt++;
      if (this.text.length > this.plan.maxTextLength)
        this.letGoText('the text so far is past limits.maxBodyBytes');
      else if (this.options.hold && !this.options.hold.set(this.text.length))
        this.letGoText("the gateway's budget of held bytes (limits.maxHeldBytes) is full");
    }
    if (Array.isArray(delta?.tool_calls) && delta.tool_calls.length > 0)
      this.unsafe = 'a tool call in progress';
    const reasoning = delta?.reasoning_content ?? delta?.reasoning;
    if (typeof reasoning === 'string' && reasoning.length > 0) this.unsafe = 'reasoning in progress';
  }

  /** Lets go of the text kept for a continuation: the stream cannot be resumed any more. */
  private letGoText(why: string): void {
    this.unsafe = why;
    this.text = '';
    this.options.hold?.release();
  }

  /** A continuation's chunk as part of the first stream; undefined for its opening role chunk. */
  private rewrite(chunk: ParsedChunk): ParsedChunk | undefined {
    const choice = chunk.choices?.[0];
    const delta = choice?.delta as DeltaLike | undefined;
    const roleOnly =
      choice !== undefined &&
      delta?.role !== undefined &&
      (delta.content === undefined || delta.content === '') &&
      (choice.finish_reason === null || choice.finish_reason === undefined);
    if (roleOnly && !chunk.usage) return undefined;
    const out: ParsedChunk = { ...chunk };
    if (this.id !== undefined) out.id = this.id;
    if (this.created !== undefined) out.created = this.created;
    if (chunk.usage) {
      out.usage = this.summedUsage(chunk.usage);
      this.lastUsage = out.usage;
    }
    return out;
  }

  /**
   * Usage over every attempt: the last attempt's own, plus for each failed attempt its output
   * chunks as completion tokens and, as its prompt, the next attempt's prompt minus what it had
   * added (the continuation prompt is the earlier prompt plus the partial output).
   */
  private summedUsage(last: Usage): Usage {
    let prompt = last.prompt_tokens;
    let completion = last.completion_tokens;
    let nextPrompt = last.prompt_tokens;
    for (let i = this.failedTokens.length - 1; i >= 0; i--) {
      const tokens = this.failedTokens[i]!;
      const ownPrompt = Math.max(0, nextPrompt - tokens);
      prompt += ownPrompt;
      completion += tokens;
      nextPrompt = ownPrompt;
    }
    return {
      ...last,
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
    };
  }

  private async failOrResume(error: StreamError): Promise<void> {
    const plan = this.plan;
    const sink = this.sink!;
    const fail = (outcome?: string) => {
      if (outcome) plan?.count(outcome);
      this.ended = true;
      this.options.hold?.release();
      sink.onFail(error);
    };
    if (!plan || !error.retryable) return fail();
    if (this.unsafe) {
      plan.log.warn(
        { requestId: plan.requestId, reason: this.unsafe },
        'stream not resumed: unsafe to continue',
      );
      return fail('unsafe');
    }
    if (this.resumes >= plan.maxAttempts) return fail('exhausted');
    const from = this.worker;
    this.failed ??= new Set();
    this.failed.add(from);
    this.failedTokens.push(this.tokensThisAttempt);
    let next: OpenedStream;
    try {
      next = await plan.open({
        text: this.text,
        tokens: this.failedTokens.reduce((a, b) => a + b, 0),
        exclude: this.failed,
        number: this.resumes + 1,
      });
    } catch (err) {
      plan.log.warn(
        { requestId: plan.requestId, from, code: isSluiceError(err) ? err.code : 'error' },
        'stream could not be resumed',
      );
      return fail('no_worker');
    }
    if (this.abandoned) {
      const gone = new ClientDisconnected();
      next.stream.abort(gone, false);
      next.attempt.release('neutral', gone);
      return;
    }
    this.current = next;
    this.workers.push(next.attempt.worker.id);
    this.models.push(next.attempt.model);
    this.attempts.push(next.attempt.worker);
    plan.count('resumed');
    plan.log.warn(
      {
        requestId: plan.requestId,
        from,
        to: next.attempt.worker.id,
        resumes: this.resumes,
        code: error.code,
      },
      'stream resumed on another worker',
    );
    if (this.paused) next.stream.pause();
    this.follow(next, true);
  }
}
