// The driver of nsqjs (Node.js): the driver contract (conformance/clients/README.md) on nsqjs.Reader and
// nsqjs.Writer. NODE_PATH names where npm installed nsqjs (tox: {envdir}/node/node_modules).
'use strict'
const fs = require('fs')
const nsq = require('nsqjs')

const env = process.env
const listed = (variable) => (env[variable] || '').split(',').filter(Boolean)
const addresses = listed('NSQC_NSQD_TCP_ADDRESSES')
const lookupds = listed('NSQC_LOOKUPD_HTTP_ADDRESSES')
const pollInterval = Number(env.NSQC_LOOKUPD_POLL_INTERVAL_MS || 60000) / 1000 // seconds
const heartbeatInterval = Math.max(1, Math.floor(Number(env.NSQC_HEARTBEAT_INTERVAL_MS || 30000) / 1000)) // seconds

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n')
}

function handle(message) {
  const order = JSON.parse(message.body.toString())
  emit('message', { id: message.id, attempts: message.attempts, body: message.body.toString() })
  switch (order.do) {
    case 'fin':
      return message.finish()
    case 'fail':
      return message.requeue() // nsqjs's ordinary failure: the configured delay, with backoff
    case 'req':
      return message.requeue(order.delay_ms, false)
    case 'touch': {
      let left = order.times
      const tick = () => {
        if (left-- > 0) {
          message.touch()
          setTimeout(tick, order.every_ms)
        } else {
          message.finish()
        }
      }
      return setTimeout(tick, order.every_ms)
    }
  }
}

function consume() {
  const maxAttempts = Number(env.NSQC_MAX_ATTEMPTS || 0)
  const reader = new nsq.Reader(env.NSQC_TOPIC, env.NSQC_CHANNEL, {
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
  })
  reader.on('message', handle)
  // nsqjs gives a message over maxAttempts to 'discard' listeners (and finishes it); with none, to the handler
  reader.on('discard', (message) => emit('discarded', { id: message.id, attempts: message.attempts }))
  reader.on('error', (error) => process.stderr.write(`reader error: ${error}\n`))
  reader.connect()
  return () => reader.close()
}

function publish() {
  const [host, port] = addresses[0].split(':')
  const writer = new nsq.Writer(host, Number(port), { heartbeatInterval })
  const operations = JSON.parse(env.NSQC_PUBLISH || '[]')
  const topic = env.NSQC_TOPIC
  const next = () => {
    const operation = operations.shift()
    if (!operation) return
    const done = (error) => {
      emit('published', { op: operation.op, ok: !error, error: error ? String(error) : '' })
      next()
    }
    if (operation.op === 'pub') writer.publish(topic, operation.body, done)
    else if (operation.op === 'mpub') writer.publish(topic, operation.bodies, done)
    else if (operation.op === 'dpub') writer.deferPublish(topic, operation.body, operation.defer_ms, done)
  }
  writer.on('ready', next)
  writer.on('error', (error) => process.stderr.write(`writer error: ${error}\n`))
  writer.connect()
  return () => writer.close()
}

const close = env.NSQC_ROLE === 'consumer' ? consume() : publish()
process.on('SIGTERM', () => {
  close()
  setTimeout(() => {
    emit('stopped')
    process.exit(0)
  }, 200) // the closes are writes on the event loop
})
