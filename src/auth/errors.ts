/** The errors of authentication and limits live with the others, in src/errors/auth-errors.ts. */
export {
  BudgetExhausted,
  InvalidApiKey,
  ModelNotAllowed,
  RateLimitExceeded,
  RateLimiterUnavailable,
} from '../errors/auth-errors.js';
