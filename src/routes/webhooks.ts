import type { FastifyPluginAsync } from 'fastify'
import { route } from '../contract.js'
import { ApiError } from '../errors.js'
import type { ChangeType } from '../store/store.js'
import type { DeliveryStatus, Subscription, WebhookStore } from '../store/webhooks.js'
import { refusalOfUrl } from '../webhooks/addresses.js'
import { newSecret } from '../webhooks/signing.js'
import { linkTo } from './links.js'

/** How long the secret a rotation replaces still signs (SPEC section 5). */
export const ROTATION_OVERLAP_MS = 24 * 3_600_000

/** A subscription as the API shows it: never a secret. */
function shown ({ disabled, ...subscription }: Subscription): object {
  return { ...subscription, enabled: disabled === undefined, ...(disabled === undefined ? {} : { disabledAt: disabled.at, disabledReason: disabled.reason }) }
}

function found<T> (value: T | undefined): T {
  if (value === undefined) throw new ApiError('webhookNotFound')
  return value
}

export interface WebhookRouteOptions {
  webhooks: WebhookStore
  /** WEBHOOKS_ALLOW_PRIVATE: URLs on private and loopback addresses are taken too. */
  allowPrivate: boolean
  /** Tells this process's dispatcher there is work now, rather than at its next look. */
  poke: () => void
}

type Params = { Params: { webhookId: bigint } }

export const webhooks: FastifyPluginAsync<WebhookRouteOptions> = async (app, { webhooks, allowPrivate, poke }) => {
  const config = { scope: 'admin' as const }

  app.route<{ Body: { url: string, events: ChangeType[], tag?: string } }>({
    ...route('createWebhook'),
    config,
    handler: async (request, reply) => {
      const { url, events, tag } = request.body
      const refused = await refusalOfUrl(url, { allowPrivate })
      if (refused !== undefined) throw new ApiError('webhookUrlRefused', refused)
      const secret = newSecret()
      const subscription = await webhooks.create({ url, events, ...(tag === undefined ? {} : { tag }), secret }, new Date())
      poke()
      return reply.code(201).header('location', `/webhooks/${subscription.id}`).send({ ...shown(subscription), secret })
    }
  })

  app.route({
    ...route('listWebhooks'),
    config,
    handler: async () => (await webhooks.list()).map(shown)
  })

  app.route<Params>({
    ...route('getWebhook'),
    config,
    handler: async (request) => shown(found(await webhooks.get(Number(request.params.webhookId))))
  })

  app.route<Params>({
    ...route('deleteWebhook'),
    config,
    handler: async (request, reply) => {
      if (!await webhooks.remove(Number(request.params.webhookId))) throw new ApiError('webhookNotFound')
      return reply.code(204).send()
    }
  })

  app.route<Params>({
    ...route('rotateWebhookSecret'),
    config,
    handler: async (request) => {
      const secret = newSecret()
      if (!await webhooks.rotate(Number(request.params.webhookId), secret, new Date(Date.now() + ROTATION_OVERLAP_MS))) throw new ApiError('webhookNotFound')
      return { secret }
    }
  })

  app.route<Params>({
    ...route('enableWebhook'),
    config,
    handler: async (request) => {
      const subscription = found(await webhooks.enable(Number(request.params.webhookId), new Date()))
      poke()
      return shown(subscription)
    }
  })

  app.route<Params & { Querystring: { status?: DeliveryStatus, after?: bigint, limit: number } }>({
    ...route('listWebhookDeliveries'),
    config,
    handler: async (request, reply) => {
      const id = Number(request.params.webhookId)
      const { status, after, limit } = request.query
      const [subscription, page] = await Promise.all([webhooks.get(id), webhooks.deliveries(id, { status, after: after === undefined ? undefined : Number(after), limit: limit + 1 })])
      found(subscription)
      if (page.length > limit) {
        page.length = limit
        reply.header('link', linkTo(request.url, 'after', BigInt(page[limit - 1].id)))
      }
      return page
    }
  })

  app.route<{ Params: { webhookId: bigint, deliveryId: bigint } }>({
    ...route('retryWebhookDelivery'),
    config,
    handler: async (request, reply) => {
      const id = Number(request.params.webhookId)
      const deliveryId = Number(request.params.deliveryId)
      // A disabled subscription is sent nothing: "attempted now" would not be true. (A delivery it lacks is still a 404.)
      if (found(await webhooks.get(id)).disabled !== undefined) {
        const [delivery] = await webhooks.deliveries(id, { after: deliveryId - 1, limit: 1 })
        throw new ApiError(delivery?.id === deliveryId ? 'webhookDisabled' : 'deliveryNotFound')
      }
      const delivery = await webhooks.retry(id, deliveryId, new Date())
      if (delivery === undefined) throw new ApiError('deliveryNotFound') // the subscription was found above
      poke()
      return reply.code(202).send(delivery)
    }
  })

  app.route<Params & { Body: { after: bigint } }>({
    ...route('replayWebhook'),
    config,
    handler: async (request, reply) => {
      const queued = await webhooks.replay(Number(request.params.webhookId), request.body.after, new Date())
      if (queued === 'not-found') throw new ApiError('webhookNotFound')
      if (queued === 'gone') throw new ApiError('changesGone', 'The change log no longer holds the changes after this position, or never reached it: replay from a position between its oldest change and its head.')
      poke()
      return reply.code(202).send({ queued })
    }
  })
}
