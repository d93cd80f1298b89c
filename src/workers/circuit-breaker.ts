export type CircuitState = 'closed' | 'open' | 'half_open';

export interface CircuitBreakerOptions {
  failureThreshold: number;
  cooldownMs: number;
  now?: () => number;
  /**
   * Asked before a closed circuit opens: false keeps it closed (an ejection cap is reached).
   * A failed half-open probe always opens it again.
   */
  canOpen?: () => boolean;
  /** Told when `canOpen` kept the circuit closed. */
  onOpenRefused?: () => void;
}

/**
 * A circuit breaker (one per worker for connection-level failures, one per worker and model for
 * the failures of that model's requests). `failureThreshold` consecutive failures open it; while open it
 * admits nothing; after `cooldownMs` one request is let through as a half-open probe, whose
 * success closes the circuit and whose failure opens it again for another cooldown.
 */
export class CircuitBreaker {
  private state: CircuitState = 'closed';
  private consecutiveFailures = 0;
  private openedAt = 0;
  private probeInFlight = false;
  private refused = false;
  private readonly now: () => number;

  constructor(
    private readonly options: CircuitBreakerOptions,
    private readonly onChange?: (state: CircuitState) => void,
  ) {
    this.now = options.now ?? (() => performance.now());
  }

  get current(): CircuitState {
    if (this.state === 'open' && this.now() - this.openedAt >= this.options.cooldownMs) return 'half_open';
    return this.state;
  }

  /** Whether a request may be sent now (without taking the half-open probe slot). */
  canAdmit(): boolean {
    const state = this.current;
    return state === 'closed' || (state === 'half_open' && !this.probeInFlight);
  }

  /** Takes the right to send one request. Returns false if the circuit refuses it. */
  tryAdmit(): boolean {
    const state = this.current;
    if (state === 'closed') return true;
    if (state === 'half_open' && !this.probeInFlight) {
      this.transition('half_open');
      this.probeInFlight = true;
      return true;
    }
    return false;
  }

  recordSuccess(): void {
    this.consecutiveFailures = 0;
    this.refused = false;
    this.probeInFlight = false;
    if (this.state !== 'closed') this.transition('closed');
  }

  recordFailure(): void {
    this.consecutiveFailures++;
    const wasProbe = this.probeInFlight;
    this.probeInFlight = false;
    if (wasProbe || this.state !== 'closed') {
      this.openedAt = this.now();
      this.transition('open');
      return;
    }
    if (this.consecutiveFailures < this.options.failureThreshold) return;
    if (this.options.canOpen && !this.options.canOpen()) {
      // Told once per run of failures, not on each one.
      if (!this.refused) this.options.onOpenRefused?.();
      this.refused = true;
      return;
    }
    this.openedAt = this.now();
    this.transition('open');
  }

  /** The admitted request ended without telling anything about the worker (client went away). */
  release(): void {
    this.probeInFlight = false;
  }

  private transition(next: CircuitState): void {
    if (this.state === next) return;
    this.refused = false;
    this.state = next;
    this.onChange?.(next);
  }
}
