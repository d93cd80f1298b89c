import { InvalidRequest } from './request-errors.js';

/**
 * Well-formed requests that ask for what cannot be: more tokens than the model allows, a tool
 * result without its call, a cursor or rank that does not exist, a compaction item made elsewhere.
 */

/**
 * A request asks for more output tokens (`max_tokens`, `max_completion_tokens`,
 * `max_output_tokens`) than its model allows: `models.<m>.maxOutputTokens`, else
 * `limits.maxOutputTokens`, within the engine's `max_model_len` when known. Refused rather than
 * clamped: a client that asked for N tokens learns it cannot have them, as OpenAI answers it.
 */
export class MaxTokensTooLarge extends InvalidRequest {
  readonly code = 'max_tokens_too_large';
  override readonly param: string;
  constructor(
    param: string,
    readonly requested: number,
    readonly limit: number,
  ) {
    super(
      `'${param}' is too large: ${requested}. This model supports at most ${limit} output tokens; ask for ${limit} or fewer, or leave it out.`,
      param,
    );
    this.param = param;
  }
  override details(): Record<string, unknown> {
    return { max_allowed: this.limit };
  }
}

/**
 * A `function_call_output` whose `call_id` answers no `function_call` before it: in the items sent
 * (`input[i].call_id`, a conversation's `items[i].call_id`), or stored in what a response continues
 * (`conversation`, `previous_response_id`: the message names the item to delete). An engine shown a
 * tool result without its call answers nonsense or fails (see responses/call-outputs.ts).
 */
export class UnmatchedCallOutput extends InvalidRequest {
  readonly code = 'unmatched_call_id';
  /**
   * @param param the request's parameter naming it: `input[1].call_id`, `items[0].call_id`, or the
   *   `conversation` / `previous_response_id` whose stored items hold it
   * @param where the item, as the message names it: `input[1]`, `item 'fco_…' of conversation 'conv_…'`
   */
  constructor(
    readonly callId: string,
    param: string,
    where: string,
  ) {
    super(
      `No function call found for the function_call_output with call_id '${callId.slice(0, 128)}' (${where.slice(0, 256)}): it must answer a function_call before it, in the items sent or in what they continue.`,
      param,
    );
  }
}

/** A list's `after` cursor names no item of the list (a 400, as a bad `starting_after` of a replay is). */
export class UnknownCursor extends InvalidRequest {
  readonly code = 'cursor_not_found';
  constructor(readonly cursor: string) {
    super(`Invalid value for 'after': no item of this list has the id '${cursor.slice(0, 128)}'.`, 'after');
  }
}

/** A compaction item whose `encrypted_content` was not made by this gateway's `/v1/responses/compact`. */
export class InvalidCompactionItem extends InvalidRequest {
  readonly code = 'invalid_compaction_item';
  constructor() {
    super(
      "A compaction item's encrypted_content was not made by this gateway's POST /v1/responses/compact and cannot be read.",
      'input',
    );
  }
}

/** `X-Data-Parallel-Rank` is not a non-negative integer. */
export class MalformedDataParallelRank extends InvalidRequest {
  readonly code = 'invalid_data_parallel_rank';
  constructor(raw: string | undefined) {
    super(`X-Data-Parallel-Rank must be a non-negative integer, got '${raw}'.`, 'x-data-parallel-rank');
  }
}

/** `X-Data-Parallel-Rank` names a rank no connected engine has. */
export class InvalidDataParallelRank extends InvalidRequest {
  readonly code = 'invalid_data_parallel_rank';
  constructor(
    readonly rank: number | string,
    readonly connectedRanks: readonly number[],
  ) {
    super(
      `Data-parallel rank ${String(rank)} is not connected; connected ranks are [${connectedRanks.join(', ')}].`,
      'x-data-parallel-rank',
    );
  }
  override details(): Record<string, unknown> {
    return { connected_ranks: [...this.connectedRanks] };
  }
}
