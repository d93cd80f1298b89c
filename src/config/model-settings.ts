import type { PolicyName, ScorerOptions } from '../routing/types.js';
import type { ModelKind } from './model-kind.js';
import type { ResumeSettings, SluiceConfig, Timeouts } from './schema.js';

/** A model's timeouts with the bound of a stream's first output resolved (firstTokenMsOf). */
export type ResolvedTimeouts = Timeouts & { readonly firstTokenMs: number };

/**
 * The default bound of a stream's time to its first output. The idle clock (60 s) was too long
 * for it: a first token that never comes must leave time for another worker or the fallback to
 * answer before the client, or a proxy in front (nginx's 60 s read timeout), gives up. 30 s
 * leaves that half, and is still over the queue and prefill of a long prompt on a loaded engine.
 */
const FIRST_TOKEN_MS = 30_000;

/**
 * A stream's bound to its first output: `timeouts.firstTokenMs`, else 30 s, at most `idleMs`
 * (a first token is never waited for longer than any other) and half of `deadlineMs` (a route
 * that never starts leaves the other half of the budget to another worker or the next model).
 */
export function firstTokenMsOf(timeouts: Timeouts): number {
  if (timeouts.firstTokenMs !== undefined) return timeouts.firstTokenMs;
  return Math.max(1, Math.floor(Math.min(FIRST_TOKEN_MS, timeouts.idleMs, timeouts.deadlineMs / 2)));
}

function resolveTimeouts(timeouts: Timeouts): ResolvedTimeouts {
  return { ...timeouts, firstTokenMs: firstTokenMsOf(timeouts) };
}

/** One model's settings, resolved: what a request for it runs under (read once per dispatch). */
export interface ModelProfile {
  readonly policy: PolicyName;
  readonly timeouts: ResolvedTimeouts;
  readonly resume: ResumeSettings;
  readonly maxOutputTokens: number;
  readonly fallbacks: readonly string[];
  readonly continuation: boolean;
  readonly scorer: ScorerOptions;
}

/** Settings that a model's entry under `models:` may override, resolved once per model. */
export class ModelSettings {
  private readonly cache = new Map<string, ModelProfile>();

  constructor(private readonly config: SluiceConfig) {}

  /** What every model without its own entry gets (one object: a client's model string is never a key). */
  private defaults: ModelProfile | undefined;

  private resolve(model: string): ModelProfile {
    if (!Object.hasOwn(this.config.models, model)) {
      this.defaults ??= {
        policy: this.config.routing.policy,
        timeouts: resolveTimeouts(this.config.timeouts),
        resume: { ...this.config.resume },
        maxOutputTokens: this.config.limits.maxOutputTokens,
        fallbacks: [],
        continuation: true,
        scorer: this.config.routing.scorer,
      };
      return this.defaults;
    }
    let settings = this.cache.get(model);
    if (!settings) {
      const own = this.config.models[model];
      settings = {
        policy: own?.policy ?? this.config.routing.policy,
        timeouts: resolveTimeouts({ ...this.config.timeouts, ...own?.timeouts }),
        resume: { ...this.config.resume, ...own?.resume },
        maxOutputTokens: own?.maxOutputTokens ?? this.config.limits.maxOutputTokens,
        fallbacks: own?.fallbacks ?? [],
        continuation: own?.continuation ?? true,
        scorer: scorerOf(this.config.routing.scorer, own?.routing?.scorer),
      };
      this.cache.set(model, settings);
    }
    return settings;
  }

  /** Every setting of `model` at once. */
  of(model: string): ModelProfile {
    return this.resolve(model);
  }

  policy(model: string): PolicyName {
    return this.resolve(model).policy;
  }

  timeouts(model: string): ResolvedTimeouts {
    return this.resolve(model).timeouts;
  }

  resume(model: string): ResumeSettings {
    return this.resolve(model).resume;
  }

  /** The configured bound of a request's output tokens (`models.<m>.maxOutputTokens`, else `limits.maxOutputTokens`). */
  maxOutputTokens(model: string): number {
    return this.resolve(model).maxOutputTokens;
  }

  /** The models that answer when this one cannot, in order (`models.<m>.fallbacks`). */
  fallbacks(model: string): readonly string[] {
    return this.resolve(model).fallbacks;
  }

  /** The scorer's weights and saturation for the model (`models.<m>.routing.scorer` over `routing.scorer`). */
  scorer(model: string): ScorerOptions {
    return this.resolve(model).scorer;
  }

  /** Whether the model accepts an assistant prefill, to continue another model's cut stream. */
  continuation(model: string): boolean {
    return this.resolve(model).continuation;
  }

  /** What `models.<m>.kind` says the model serves; undefined when it says nothing. */
  kinds(model: string): readonly ModelKind[] | undefined {
    return Object.hasOwn(this.config.models, model) ? this.config.models[model]?.kind : undefined;
  }
}

type ModelScorer = NonNullable<NonNullable<SluiceConfig['models'][string]['routing']>['scorer']>;

/** The gateway's scorer settings with a model's own over them (its unset fields keep the gateway's). */
function scorerOf(base: ScorerOptions, own: ModelScorer | undefined): ScorerOptions {
  if (!own) return base;
  const weights = { ...base.weights };
  for (const [name, value] of Object.entries(own.weights ?? {}))
    if (value !== undefined) weights[name as keyof typeof weights] = value;
  const saturation = { ...base.saturation };
  if (own.saturation?.maxWaiting !== undefined) saturation.maxWaiting = own.saturation.maxWaiting;
  if (own.saturation?.maxKvCacheUsage !== undefined)
    saturation.maxKvCacheUsage = own.saturation.maxKvCacheUsage;
  const heavy = { ...base.heavy };
  if (own.heavy?.isolate !== undefined) heavy.isolate = own.heavy.isolate;
  if (own.heavy?.prefillShare !== undefined) heavy.prefillShare = own.heavy.prefillShare;
  if (own.heavy?.longPrefillChars !== undefined) heavy.longPrefillChars = own.heavy.longPrefillChars;
  if (own.saturation?.defaultBatch !== undefined) saturation.defaultBatch = own.saturation.defaultBatch;
  return { weights, saturation, heavy };
}
