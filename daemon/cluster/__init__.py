"""The cluster side: ZooKeeper paths and znode JSON (`znodes`); the ZooKeeper link and
the metadata cache join them here as issue 10 proceeds."""
