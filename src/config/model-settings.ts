import type { PolicyName } from '../routing/types.js';
import type { SluiceConfig, Timeouts } from './schema.js';

/** Settings that a model's entry under `models:` may override, resolved once per model. */
export class ModelSettings {
  private readonly cache = new Map<string, { policy: PolicyName; timeouts: Timeouts }>();

  constructor(private readonly config: SluiceConfig) {}

  private resolve(model: string): { policy: PolicyName; timeouts: Timeouts } {
    let settings = this.cache.get(model);
    if (!settings) {
      const own = this.config.models[model];
      settings = {
        policy: own?.policy ?? this.config.routing.policy,
        timeouts: { ...this.config.timeouts, ...own?.timeouts },
      };
      this.cache.set(model, settings);
    }
    return settings;
  }

  policy(model: string): PolicyName {
    return this.resolve(model).policy;
  }

  timeouts(model: string): Timeouts {
    return this.resolve(model).timeouts;
  }
}
