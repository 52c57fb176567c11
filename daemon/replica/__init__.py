"""Partitions hosted on this broker: their state, the data path, producer state, and
who leads them (standalone today: this broker leads every one)."""
