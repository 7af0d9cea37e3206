"""The checks, one module per concern; each exposes run(ctx) -> Result."""
