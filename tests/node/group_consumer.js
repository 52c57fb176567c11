// A kafkajs consumer group member, as a Node.js application would run one: subscribe
// with a groupId, read `count` messages (from the beginning when the group has no
// commits), commit, leave; then print what it read and the group's committed offsets
// as one JSON line. Usage: node group_consumer.js BOOTSTRAP TOPIC GROUP COUNT
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, groupId, count] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'logkeeper-test', brokers: bootstrap.split(','),
                          logLevel: logLevel.ERROR })

async function main () {
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const values = []
  await new Promise((resolve) => {
    consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value.toString())
        if (values.length >= Number(count)) resolve()
      }
    })
  })
  await consumer.disconnect() // commits what was read, then leaves the group
  const admin = kafka.admin()
  await admin.connect()
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  await admin.disconnect()
  console.log(JSON.stringify({ values, offsets }))
}

main().then(() => process.exit(0)).catch((err) => { console.error(err); process.exit(1) })
