"""Producer ids for InitProducerId, unique across the cluster.

An idempotent producer's batches are told apart by producer id alone, so two producers
must never share one, even when they asked different brokers. In ZooKeeper mode each
broker claims blocks of `PRODUCER_ID_BLOCK_SIZE` ids in `/latest_producer_id_block`
(`ClusterLink.claim_producer_id_block`, Kafka's ZkProducerIdManager) and hands them out
in order; standalone, the only broker counts from a base taken from the clock, so a
restarted broker does not hand out the ids of its previous run again.

Kafka answers an idempotent (non-transactional) producer's InitProducerId with a new id
and epoch 0 every time, also when the request names its current id and epoch to have
its epoch bumped (KIP-360): so do we.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from ..cluster.znodes import ProducerIdBlock


class ProducerIds:
    def __init__(self, claim_block: Callable[[], Awaitable[ProducerIdBlock]]):
        self._claim_block = claim_block
        self._next = 0
        self._end = -1  # the current block's last id; none left when _next > _end
        self._lock = asyncio.Lock()

    @classmethod
    def standalone(cls, broker_id: int) -> ProducerIds:
        """One block of 2**16 ids per second since the epoch: ids of a previous run are
        not handed out again unless it ran more than 65536 InitProducerIds a second."""
        base = (int(time.time()) & 0x7FFFFFFF) << 16

        async def claim() -> ProducerIdBlock:
            nonlocal base
            block = ProducerIdBlock(broker_id, base, base + 2**16 - 1)
            base += 2**16
            return block

        return cls(claim)

    async def next_id(self) -> int:
        """The next unused producer id; raises whatever claiming a block raised."""
        async with self._lock:
            if self._next > self._end:
                block = await self._claim_block()
                self._next, self._end = block.start, block.end
            pid = self._next
            self._next += 1
            return pid
