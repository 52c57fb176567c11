"""The log dirs: one worker each, their states, and the log manager (open, recover,
close, placement, retention, checkpoints)."""
