"""The blocking command-line clients: `logkeeper log-dirs` and `logkeeper topics`."""
