/**
 * What a route declares, in its fastify `config`, about who may reach it and when. Hooks read it
 * from the route the router matched (`request.routeOptions.config`), so a decision never rests
 * on how the URL was spelled.
 */
export interface RouteAccess {
  /** Served while the gateway drains (health and metrics), when every other route answers 503. */
  servesWhileDraining?: boolean;
}

export const SERVES_WHILE_DRAINING: { config: RouteAccess } = { config: { servesWhileDraining: true } };
