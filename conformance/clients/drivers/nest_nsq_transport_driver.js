// The driver of nest-nsq-transport (NestJS microservice transport on nsqjs): the driver contract
// (conformance/clients/README.md) on its NSQStrategy, with one event handler for `<topic>/<channel>` added as
// NestJS adds a controller's @EventPattern handler (addHandler), and its NSQClient's emit(), awaited. The strategy
// finishes a message whose handler returns and requeues it (message.requeue(), nsqjs's default delay) when it
// throws. Its client publishes one message per emit: no MPUB, no DPUB (drivers.toml: lacks). NODE_PATH: where npm
// put it.
'use strict'
const fs = require('fs')
const { NSQStrategy, NSQClient } = require('nest-nsq-transport')
const { lastValueFrom } = require('rxjs')

const env = process.env
const listed = (variable) => (env[variable] || '').split(',').filter(Boolean)
const addresses = listed('NSQC_NSQD_TCP_ADDRESSES')
const lookupds = listed('NSQC_LOOKUPD_HTTP_ADDRESSES')
const pollInterval = Number(env.NSQC_LOOKUPD_POLL_INTERVAL_MS || 60000) / 1000 // seconds, as nsqjs takes it
const heartbeatInterval = Math.max(1, Math.floor(Number(env.NSQC_HEARTBEAT_INTERVAL_MS || 30000) / 1000))
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n')
}

async function handle(data, context) {
  const message = context.message
  const order = JSON.parse(data)
  emit('message', { id: message.id, attempts: message.attempts, body: data })
  switch (order.do) {
    case 'fail':
      throw new Error('told to fail') // the transport's ordinary failure: requeue() with nsqjs's default delay
    case 'req':
      throw new Error('requeue') // the transport's only requeue: a throw, with requeueParams giving the delay
    case 'touch':
      for (let left = order.times; left > 0; left--) {
        await sleep(order.every_ms)
        message.touch()
      }
      return sleep(order.every_ms)
  }
}

async function consume() {
  const maxAttempts = Number(env.NSQC_MAX_ATTEMPTS || 0)
  const strategy = new NSQStrategy({
    defaultChannelOptions: {
      ...(addresses.length ? { nsqdTCPAddresses: addresses } : {}),
      ...(lookupds.length ? { lookupdHTTPAddresses: lookupds, lookupdPollInterval: pollInterval } : {}),
      maxInFlight: Number(env.NSQC_MAX_IN_FLIGHT || 1),
      heartbeatInterval,
      ...(maxAttempts ? { maxAttempts } : {}),
      ...(env.NSQC_MAX_BACKOFF_MS ? { maxBackoffDuration: Number(env.NSQC_MAX_BACKOFF_MS) / 1000 } : {}), // seconds
      ...(env.NSQC_TLS === '1' ? { tls: true, tlsVerification: true, ca: fs.readFileSync(env.NSQC_TLS_CA_FILE) } : {}),
      ...(env.NSQC_SNAPPY === '1' ? { snappy: true } : {}),
      ...(env.NSQC_DEFLATE === '1' ? { deflate: true } : {}),
      ...('NSQC_AUTH_SECRET' in env ? { authSecret: env.NSQC_AUTH_SECRET } : {}),
      // a thrown handler's requeue arguments: `req` with its delay and no backoff, `fail` nsqjs's defaults
      requeueParams: (message) => {
        const order = JSON.parse(message.body.toString())
        return order.do === 'req' ? [order.delay_ms, false] : []
      },
    },
  })
  strategy.addHandler(`${env.NSQC_TOPIC}/${env.NSQC_CHANNEL}`, handle, true)
  // a message over maxAttempts goes to the `/discard` handler (without one, to `handle` again), then is finished
  strategy.addHandler(`${env.NSQC_TOPIC}/${env.NSQC_CHANNEL}/discard`, async (data, context) =>
    emit('discarded', { id: context.message.id, attempts: context.message.attempts }), true)
  strategy.listen(() => {}).catch((error) => process.stderr.write(`listen: ${error}\n`))
  return () => strategy.close()
}

async function publish() {
  const client = new NSQClient({ nsqdURL: addresses[0], heartbeatInterval })
  await client.connect()
  for (const operation of JSON.parse(env.NSQC_PUBLISH || '[]')) {
    try {
      await lastValueFrom(client.emit(env.NSQC_TOPIC, operation.body), { defaultValue: undefined })
      emit('published', { op: operation.op, ok: true, error: '' })
    } catch (error) {
      emit('published', { op: operation.op, ok: false, error: String(error) })
    }
  }
  return () => client.close()
}

const closing = env.NSQC_ROLE === 'consumer' ? consume() : publish()
process.on('SIGTERM', async () => {
  await (await closing)()
  setTimeout(() => {
    emit('stopped')
    process.exit(0)
  }, 200) // the closes are writes on the event loop
})
