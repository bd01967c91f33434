"""The running process: the daemon's wiring, the poll scheduler, reloads, start-up, logging
and process tuning."""
