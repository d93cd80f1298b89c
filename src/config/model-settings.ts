import type { PolicyName } from '../routing/types.js';
import type { ResumeSettings, SluiceConfig, Timeouts } from './schema.js';

interface Resolved {
  policy: PolicyName;
  timeouts: Timeouts;
  resume: ResumeSettings;
}

/** Settings that a model's entry under `models:` may override, resolved once per model. */
export class ModelSettings {
  private readonly cache = new Map<string, Resolved>();

  constructor(private readonly config: SluiceConfig) {}

  private resolve(model: string): Resolved {
    let settings = this.cache.get(model);
    if (!settings) {
      const own = this.config.models[model];
      settings = {
        policy: own?.policy ?? this.config.routing.policy,
        timeouts: { ...this.config.timeouts, ...own?.timeouts },
        resume: { ...this.config.resume, ...own?.resume },
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

  resume(model: string): ResumeSettings {
    return this.resolve(model).resume;
  }
}
