"""The main job (`python -m tlc.train`): launcher, tasks, data, models, netem
testbed and the live controllers' feed. A user's own job needs none of it;
it imports `tlc` (the library) only."""
