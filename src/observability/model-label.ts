/** The label of every model the registry does not know: metrics, the dashboard, log fields. */
export const UNKNOWN_MODEL = 'unknown';

/** How much of a client's model string a log line keeps (`requestedModel`). */
export const REQUESTED_MODEL_MAX = 64;

/**
 * The one decision on a model's label, used by every metric, the dashboard and the request log:
 * a model some worker serves is itself, anything else (a client's typo, a random string, a
 * non-string) is `unknown`. Clients cannot grow the gateway's series, rows or label values.
 */
export function modelLabel(knows: (model: string) => boolean, model: unknown): string {
  return typeof model === 'string' && knows(model) ? model : UNKNOWN_MODEL;
}

/** A client's model string for a log line, cut to REQUESTED_MODEL_MAX characters; undefined if none. */
export function requestedModel(model: unknown): string | undefined {
  if (typeof model !== 'string') return undefined;
  return model.length > REQUESTED_MODEL_MAX ? `${model.slice(0, REQUESTED_MODEL_MAX)}…` : model;
}
