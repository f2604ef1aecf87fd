"""The main job (`python -m tlc.train`): flags, launcher, tasks, data, models
and the live controllers' feed (its slow links come from testbed/netem.py).
A user's own job needs none of it; it imports `tlc` (the library) only."""
