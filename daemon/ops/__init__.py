"""What operators and their tools see: metrics, the HTTP endpoint, systemd notify."""
