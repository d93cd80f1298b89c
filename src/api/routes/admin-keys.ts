import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { CreateKeyInput, KeyRecord } from '../../auth/index.js';
import { ApiKeyNotFound } from '../../errors/not-found-errors.js';
import { InvalidBody } from '../../errors/request-errors.js';
import { StorageDisabled } from '../../errors/storage-errors.js';
import type { GatewayContext } from '../context.js';

type IdRequest = FastifyRequest<{ Params: { id: string } }>;

function keyObject(record: KeyRecord) {
  return {
    id: record.id,
    object: 'api_key',
    name: record.name,
    prefix: record.prefix,
    models: record.models,
    rpm: record.rpm,
    tpm: record.tpm,
    budget_tokens: record.budgetTokens,
    created_at: record.createdAt,
  };
}

/**
 * Virtual API keys: `POST /admin/keys` (answers the secret once, in `key`), `GET /admin/keys`,
 * `GET/DELETE /admin/keys/:id`, `GET /admin/keys/:id/usage`. Only digests are stored.
 */
export function adminKeyRoutes(ctx: GatewayContext) {
  const service = () => {
    if (!ctx.access.keys) {
      throw new StorageDisabled('API keys need storage; this gateway runs with storage.kind none.');
    }
    return ctx.access.keys;
  };
  const found = async (id: string) => {
    const record = await service().get(id);
    if (!record) throw new ApiKeyNotFound(id);
    return record;
  };
  return async (app: FastifyInstance): Promise<void> => {
    app.post('/admin/keys', async (request, reply) => {
      const body = (request.body ?? {}) as Record<string, unknown>;
      if (typeof body !== 'object' || Array.isArray(body)) {
        throw new InvalidBody('The request body must be a JSON object.');
      }
      const { budget_tokens: budgetTokens, ...rest } = body;
      // KeyService.create validates its input (a 400 naming the field); the wire name is budget_tokens.
      const input = { ...rest, ...(budgetTokens !== undefined ? { budgetTokens } : {}) } as CreateKeyInput;
      const created = await service().create(input);
      await ctx.access.refresh();
      ctx.log.info({ key: created.record.id, prefix: created.record.prefix }, 'API key created');
      reply.code(201);
      return { ...keyObject(created.record), key: created.secret };
    });
    app.get('/admin/keys', async () => ({ object: 'list', data: (await service().list()).map(keyObject) }));
    app.get('/admin/keys/:id', async (request: IdRequest) => keyObject(await found(request.params.id)));
    app.get('/admin/keys/:id/usage', async (request: IdRequest) => {
      const record = await found(request.params.id);
      const usage = await service().usage(record.id);
      return {
        id: record.id,
        object: 'api_key.usage',
        ...usage,
        budget_left: await service().budgetLeft(record),
      };
    });
    app.delete('/admin/keys/:id', async (request: IdRequest) => {
      if (!(await service().delete(request.params.id))) {
        throw new ApiKeyNotFound(request.params.id);
      }
      await ctx.access.refresh();
      return { id: request.params.id, object: 'api_key.deleted', deleted: true };
    });
  };
}
