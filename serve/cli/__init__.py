"""The `serve` command line."""
