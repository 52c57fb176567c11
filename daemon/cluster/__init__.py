"""The cluster side: the ZooKeeper link (`link`), ZooKeeper paths and znode JSON
(`znodes`); the metadata cache joins them here as issue 10 proceeds."""
