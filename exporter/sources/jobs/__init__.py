"""Job-identity sources: which job each GPU works for, outside Kubernetes (docs/jobs.md)."""
