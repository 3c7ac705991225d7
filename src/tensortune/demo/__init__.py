"""The main job: tune a C matrix multiplication on this CPU against numpy."""
