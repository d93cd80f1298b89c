/**
 * Whether a tenant is heavy: the one rule of it, read each time it is used (a tenant that was
 * heavy when its request queued and has since drained is not judged by its old weight).
 *
 * 'heavy' when `tenant` has more than `heavyShare` times the mean of the other tenants' requests
 * for the model in flight (those that have any; every replica's; never when no other tenant has
 * any); 'light' when it is not but another tenant is; undefined while none is. The engines'
 * priority sends a heavy tenant back; the scorer keeps its long prompts from the workers the
 * others need (RouteContext.tenantWeight).
 */
export type TenantWeight = 'heavy' | 'light' | undefined;

/**
 * The weights of every tenant of a model at one moment: the sums are taken once (one pass over the
 * tenants in flight, here and on the other replicas), then each tenant's weight is read in O(1).
 */
export function weighTenants(
  heavyShare: number,
  here: ReadonlyMap<string, number> | undefined,
  elsewhere: ReadonlyMap<string, number> | undefined,
): (tenant: string) => TenantWeight {
  let total = 0;
  let tenants = 0;
  let most = 0;
  const count = (n: number) => {
    if (n <= 0) return;
    total += n;
    tenants++;
    if (n > most) most = n;
  };
  if (here) for (const [name, n] of here) count(n + (elsewhere?.get(name) ?? 0));
  if (elsewhere) for (const [name, n] of elsewhere) if (!here?.has(name)) count(n);
  if (tenants < 2) return () => undefined;
  // A tenant with n in flight is heavy past heavyShare times the others' mean; the test grows
  // with n, so some tenant is heavy exactly when the one with the most is.
  const heavy = (n: number) => n > 0 && n > (heavyShare * (total - n)) / (tenants - 1);
  if (!heavy(most)) return () => undefined;
  return (tenant) => (heavy((here?.get(tenant) ?? 0) + (elsewhere?.get(tenant) ?? 0)) ? 'heavy' : 'light');
}
