import { LEVEL_EPSILON, WINDOW_MS } from './token-bucket.js';

/**
 * The one script behind every RedisRateLimiter call, so that reading, refilling and updating
 * both buckets is a single atomic step however many gateway replicas share the keys. It uses
 * the Redis server's clock (TIME), so replicas with skewed clocks still agree. The formulas are
 * those of token-bucket.ts.
 *
 * KEYS[1] the request bucket, KEYS[2] the token bucket: hashes {tokens, ts (server ms)}.
 * ARGV[1] rpm, ARGV[2] tpm (0 for no limit), ARGV[3] '1' to admit one request (a check),
 * ARGV[4] tokens to deduct (after a response).
 * Returns {allowed (0 or 1), request level, token level}, a level being '' without a limit.
 */
export const RATE_LIMIT_LUA = `
local window_ms = ${WINDOW_MS}
local epsilon = ${LEVEL_EPSILON}
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local function level(key, capacity)
  local state = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens, ts = tonumber(state[1]), tonumber(state[2])
  if tokens == nil or ts == nil then return capacity end
  return math.min(capacity, tokens + math.max(0, now - ts) * capacity / window_ms)
end

local function save(key, capacity, tokens)
  redis.call('HSET', key, 'tokens', tostring(tokens), 'ts', tostring(now))
  -- A missing bucket reads as full, so the hash can expire once it would have refilled.
  redis.call('PEXPIRE', key, math.ceil((capacity - tokens) * window_ms / capacity) + 1000)
end

local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local admit, spend = ARGV[3] == '1', tonumber(ARGV[4])
local requests, tokens = nil, nil
if rpm > 0 then requests = level(KEYS[1], rpm) end
if tpm > 0 then tokens = level(KEYS[2], tpm) end

local allowed = 1
if admit then
  if (requests and requests < 1 - epsilon) or (tokens and tokens < 1 - epsilon) then
    allowed = 0
  elseif requests then
    requests = requests - 1
    save(KEYS[1], rpm, requests)
  end
end
if tokens and spend > 0 then
  tokens = tokens - spend
  save(KEYS[2], tpm, tokens)
end
return {allowed, requests and tostring(requests) or '', tokens and tostring(tokens) or ''}
`;

export interface ScriptResult {
  allowed: boolean;
  requests: number | null;
  tokens: number | null;
}

export function parseScriptReply(reply: unknown): ScriptResult {
  if (!Array.isArray(reply) || reply.length !== 3) throw new Error('unexpected rate limit script reply');
  const [allowed, requests, tokens] = reply;
  return { allowed: allowed === 1, requests: parseLevel(requests), tokens: parseLevel(tokens) };
}

function parseLevel(value: unknown): number | null {
  if (value === '') return null;
  const level = Number(value);
  if (typeof value !== 'string' || !Number.isFinite(level)) throw new Error('unexpected bucket level');
  return level;
}
