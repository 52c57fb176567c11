"""Log-dir health: evidence in (probes, watcher, slow disks), one transition handler
out, and the operators' commands."""
