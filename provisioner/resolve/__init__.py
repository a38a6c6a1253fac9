"""Request -> candidates -> one consistent Stack (or a refusal with reasons and the nearest valid stacks)."""
