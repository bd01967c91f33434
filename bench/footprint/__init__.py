"""What the daemon costs: CPU, memory, scrape latency."""
