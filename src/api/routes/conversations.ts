import type { FastifyInstance, FastifyRequest } from 'fastify';
import { validateBody } from '../../pipeline/validate-body.js';
import {
  addItemsSchema,
  createConversationSchema,
  updateConversationSchema,
} from '../../responses/conversations.js';
import { listObject, pageRequest } from '../../responses/pagination.js';
import { admitCaller, callerOf } from '../caller.js';
import type { GatewayContext } from '../context.js';

type ConversationRequest = FastifyRequest<{ Params: { id: string; itemId?: string }; Querystring: unknown }>;

/** `POST/GET/DELETE /v1/conversations[/:id]` and `/v1/conversations/:id/items[/:item_id]`. */
export function conversationRoutes(ctx: GatewayContext) {
  const service = ctx.conversations;
  return async (app: FastifyInstance): Promise<void> => {
    app.addHook('preHandler', (request, reply) => admitCaller(ctx, request, reply));
    app.post('/v1/conversations', async (request) => {
      // An empty body is a conversation without metadata or items.
      return service.create(validateBody(createConversationSchema, request.body ?? {}), callerOf(request));
    });
    app.get('/v1/conversations/:id', async (request: ConversationRequest) =>
      service.get(request.params.id, callerOf(request)),
    );
    app.post('/v1/conversations/:id', async (request: ConversationRequest) =>
      service.update(
        request.params.id,
        validateBody(updateConversationSchema, request.body).metadata,
        callerOf(request),
      ),
    );
    app.delete('/v1/conversations/:id', async (request: ConversationRequest) => {
      await service.delete(request.params.id, callerOf(request));
      return { id: request.params.id, object: 'conversation.deleted', deleted: true };
    });
    app.get('/v1/conversations/:id/items', async (request: ConversationRequest) =>
      listObject(await service.listItems(request.params.id, pageRequest(request.query), callerOf(request))),
    );
    app.post('/v1/conversations/:id/items', async (request: ConversationRequest) => {
      const added = await service.addItems(
        request.params.id,
        validateBody(addItemsSchema, request.body).items,
        callerOf(request),
      );
      return listObject({ data: added, hasMore: false });
    });
    app.get('/v1/conversations/:id/items/:itemId', async (request: ConversationRequest) =>
      service.getItem(request.params.id, request.params.itemId!, callerOf(request)),
    );
    app.delete('/v1/conversations/:id/items/:itemId', async (request: ConversationRequest) =>
      service.deleteItem(request.params.id, request.params.itemId!, callerOf(request)),
    );
  };
}
