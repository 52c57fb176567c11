"""The ZooKeeper-mode controller (issue 10; docs/controller.md).

Every daemon with `zookeeper.connect` runs a `Controller`; the one elected through
`/controller` and `/controller_epoch` acts. Modules, one concern each:
- `election`: taking `/controller` and bumping `/controller_epoch` in one transaction;
- `zkops`: every controller write as a transaction checked against the epoch's zkVersion;
- `context`: what the controller knows of brokers, topics, partitions and replicas;
- `events`: the event records and the one thread that processes them;
- `leader_election`, `state_machines`: the pure algorithms and Kafka's state machines;
- `deletion`: topic deletion;
- `reassignment`: partition reassignment (AlterPartitionReassignments);
- `channel`: the request batch and one sender thread per broker;
- `controller`: the handlers that tie them together, and the API (`create_topics`,
  `delete_topics`).
"""

from .controller import Controller, TopicResult, TopicSpec
from .election import ControllerElection, Elected
from .zkops import ControllerMovedError, ControllerZk

__all__ = ["Controller", "ControllerElection", "ControllerMovedError", "ControllerZk", "Elected",
           "TopicResult", "TopicSpec"]
