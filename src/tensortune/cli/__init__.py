"""The `tensortune` command line."""
