"""harness: trains identical backbones per (encoding, task, seed), evaluates far past the
training length, and stores the results. Depends on pezoo only through its public API."""
