"""`python -m tlc.train`: the main job (tlc/job/main.py)."""
from tlc.job.main import entry

if __name__ == "__main__":
    entry()
