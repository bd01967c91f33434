"""NCCL's own count of the collectives each rank launched, read from its RAS endpoint."""
