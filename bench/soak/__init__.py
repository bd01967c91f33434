"""Long runs with faults: memory, descriptors, threads."""
